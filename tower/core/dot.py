"""Draw a Machine as Graphviz DOT (``tower graph AGENT --format svg|png`` runs the local
``dot``): gated nodes as orange octagons, budget escalations as dashed red edges.
"""

from __future__ import annotations

from tower.core.graph import DONE, FAILED, START, Machine
from tower.core.moves import gate_exits, labelled_moves


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(machine: Machine) -> str:
    lines = [
        f"digraph {_q(machine.name)} {{",
        '  graph [rankdir=TB, fontname="DejaVu Sans", fontsize=11, labelloc=t, '
        f"label={_q(f'agent: {machine.name}')}];",
        '  node [shape=box, style="rounded,filled", fillcolor="#eef3fb", color="#4a6fa5", '
        'fontname="DejaVu Sans", fontsize=11];',
        '  edge [fontname="DejaVu Sans", fontsize=9, color="#555555"];',
        f'  {_q(START)} [shape=circle, label="", width=0.25, fillcolor=black, color=black];',
        f'  {_q(DONE)} [shape=doublecircle, label="DONE", width=0.5, fillcolor="#d8f0d8", '
        'color="#3c8c3c"];',
        f'  {_q(FAILED)} [shape=doublecircle, label="FAILED", width=0.5, '
        'fillcolor="#f8d8d8", color="#b03030"];',
    ]
    budget = machine.budget
    for name, node in machine.nodes.items():
        label = name
        if node.tools:
            label += "\ntools: " + ", ".join(node.tools)
        if node.proposes:
            label += "\nproposes: " + ", ".join(node.proposes)
        if budget is not None and name in budget.max_visits:
            label += f"\n≤ {budget.max_visits[name]} visits"
        gate = machine.gates.get(name)
        if gate is not None:
            label += f"\nGATE {gate.name} ({gate.when}) · role {gate.role}"
            lines.append(f'  {_q(name)} [label={_q(label)}, shape=octagon, '
                         'fillcolor="#fde9c8", color="#c77800", penwidth=2];')
        else:
            lines.append(f"  {_q(name)} [label={_q(label)}];")
    lines.append(f"  {_q(START)} -> {_q(machine.entry)};")
    for source, target, edge_label in labelled_moves(machine):
        attrs = f" [label={_q(edge_label)}]" if edge_label else ""
        lines.append(f"  {_q(source)} -> {_q(target)}{attrs};")
    for gated, gate in machine.gates.items():
        for target, names in gate_exits(gate).items():
            lines.append(f"  {_q(gated)} -> {_q(target)} [label={_q('gate ' + ' / '.join(names))}"
                         ', color="#c77800", fontcolor="#c77800", style=dashed];')
    if budget is not None:
        limited = set(budget.max_visits)
        for source, out in machine.transitions.items():
            over = sorted(limited & set(out.targets))
            if over and source != budget.escalate_to:
                lines.append(f"  {_q(source)} -> {_q(budget.escalate_to)} "
                             f"[label={_q('over budget')}, color=\"#b03030\", "
                             'fontcolor="#b03030", style=dashed];')
        limits = budget.limits()
        if limits:
            note = "budget → " + budget.escalate_to + "\n" + "\n".join(limits)
            lines.append(f'  "budget" [shape=note, label={_q(note)}, fillcolor="#fff8d0", '
                         'color="#b09000", fontsize=10];')
            lines.append(f'  "budget" -> {_q(budget.escalate_to)} [style=dotted, '
                         'arrowhead=none, color="#b09000"];')
    lines.append("}")
    return "\n".join(lines) + "\n"

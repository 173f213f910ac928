"""Pictures of a machine as text, made from the moves it declares (the real graph, never a
hand-drawn copy): a Mermaid state diagram, and Graphviz DOT (``tower graph AGENT --format
svg|png`` runs the local ``dot``: gated nodes as orange octagons, budget escalations as
dashed red edges). The inbox's SVG (tower/cli/inbox/drawing.py) draws the same moves.
"""

from __future__ import annotations

from collections.abc import Iterator

from tower.core.gates import Gate
from tower.core.graph import DONE, FAILED, START, Machine


def labelled_moves(machine: Machine) -> Iterator[tuple[str, str, str]]:
    """(source, target, label) for every declared move: the edge's label (or its route's
    name) and the guard that checks it."""
    for source, out in machine.transitions.items():
        for target in out.targets:
            label = out.labels.get(target) or (out.route.__name__ if out.route else "")
            guard = out.guards.get(target)
            if guard is not None:
                label = f"{label} [{guard.__name__}]".strip()
            yield source, target, label


def gate_exits(gate: Gate) -> dict[str, list[str]]:
    """Where a gate sends a run other than on through its node: target -> why."""
    exits: dict[str, list[str]] = {}
    for target, why in ((gate.on_reject, "rejected"), (gate.on_timeout, "timeout"),
                        (gate.on_stale, "stale")):
        if target:
            exits.setdefault(target, []).append(why)
    return exits


def to_mermaid(machine: Machine) -> str:
    def ref(node: str) -> str:
        return "[*]" if node in (START, DONE) else node

    lines = ["stateDiagram-v2", f"    {ref(START)} --> {machine.entry}"]
    for source, target, label in labelled_moves(machine):
        lines.append(f"    {source} --> {ref(target)}" + (f": {label}" if label else ""))
    for node, gate in machine.gates.items():
        lines.append(f"    note left of {node}: gate {gate.name} {gate.when} {node}, "
                     f"role {gate.role}")
        for target, names in gate_exits(gate).items():
            lines.append(f"    {node} --> {ref(target)}: gate {' / '.join(names)}")
    for source, handler in machine.recovery.items():
        lines.append(f"    {source} --> {handler}: error")
    budget = machine.budget
    if budget is not None:
        # Entering a node past its visit limit escalates instead: draw that move.
        # (A gate's exits count: a timeout or rejection can enter a node past its limit.)
        enters = [(source, out.targets) for source, out in machine.transitions.items()]
        enters += [(node, tuple(gate_exits(gate))) for node, gate in machine.gates.items()]
        for limited, limit in budget.max_visits.items():
            drawn: set[str] = set()
            for source, targets in enters:
                if limited in targets and source not in drawn:
                    drawn.add(source)
                    lines.append(f"    {source} --> {ref(budget.escalate_to)}: over budget "
                                 f"({limited} > {limit} visits)")
        if budget.max_steps is not None:
            lines.append(f"    note right of {machine.entry}: at most {budget.max_steps} steps, "
                         f"then {budget.escalate_to}")
        spend = [limit for limit in budget.limits() if "tokens" in limit or "$" in limit]
        if spend:
            lines.append(f"    note right of {budget.escalate_to}: spend budget: "
                         f"{', '.join(spend)}")
    if any(FAILED in out.targets for out in machine.transitions.values()):
        lines.append(f"    {FAILED} --> [*]")
    return "\n".join(lines) + "\n"


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

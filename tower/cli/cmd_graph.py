"""`tower graph AGENT`: the agent's real state machine, drawn locally from the compiled
machine (Mermaid text, or an SVG picture drawn in pure Python: no Graphviz, no network)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from tower.cli.agents import agents
from tower.cli.common import CliError, agent_class
from tower.cli.output import json_option, print_json
from tower.core.graph import Machine
from tower.core.pictures import machine_svg, to_mermaid


@click.command("graph", help=(
    "Draw AGENT's graph, built from the compiled machine, with its approval gates and budgets "
    "marked, as Mermaid text or an SVG picture (no Graphviz needed), to stdout or --out. "
    "--all --out-dir DIR draws every agent. "
    "--check prints what compile() proved of AGENT (every agent without one): each cycle's "
    "bound, the gate every side-effecting node is behind; a graph that fails a proof does not "
    "load (exit 2, naming the path)."))
@click.argument("agent", metavar="AGENT", required=False)
@click.option("--check", is_flag=True, help="print the graph's proof instead of drawing it")
@click.option("--format", "fmt", type=click.Choice(["mermaid", "svg"]), default="mermaid",
              show_default=True)
@click.option("--out", help="write to this file instead of stdout")
@click.option("--all", "every", is_flag=True, help="every agent, into --out-dir")
@click.option("--out-dir", help="folder for --all (files named AGENT.FORMAT)")
@json_option("the graph as JSON (nodes, transitions, gates, budget, mermaid)")
def command(agent: str | None, check: bool, fmt: str, out: str | None, every: bool,
            out_dir: str | None, as_json: bool) -> int:
    if check:  # compile() made each proof; a graph without one does not load
        machines = ([agent_class(agent).machine] if agent
                    else [cls.machine for _, cls in sorted(agents().items())])
        proofs = {m.name: m.proof.lines() if m.proof else ["not proven"] for m in machines}
        if as_json:
            print_json({"proven": proofs})
            return 0
        for name, lines in proofs.items():
            print(f"{name}: proven")
            print("".join(f"  {line}\n" for line in lines), end="")
        return 0
    if every:
        if not out_dir:
            raise CliError("--all needs --out-dir DIR")
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        written = []
        for name, cls in sorted(agents().items()):
            path = Path(out_dir) / f"{name}.{'mmd' if fmt == 'mermaid' else fmt}"
            path.write_text(render(cls.machine, fmt), encoding="utf-8")
            written.append(str(path))
        if as_json:
            print_json({"written": written})
        else:
            print("\n".join(written))
        return 0
    if not agent:
        raise CliError("name an AGENT (or use --all --out-dir DIR)")
    machine = agent_class(agent).machine
    if as_json:
        print_json(describe_graph(machine))
        return 0
    text = render(machine, fmt)
    if out:
        Path(out).write_text(text, encoding="utf-8")
        print(f"wrote {out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def render(machine: Machine, fmt: str) -> str:
    return to_mermaid(machine) if fmt == "mermaid" else machine_svg(machine, None) + "\n"


def describe_graph(machine: Machine) -> dict[str, Any]:
    budget = machine.budget
    return {
        "agent": machine.name,
        "entry": machine.entry,
        "nodes": [{"name": n.name, "tools": list(n.tools), "description": n.description.strip()}
                  for n in machine.nodes.values()],
        "transitions": [
            {"source": s, "target": t, "label": out.labels.get(t, ""),
             "route": out.route.__name__ if out.route else None,
             "guard": out.guards[t].__name__ if t in out.guards else None}
            for s, out in machine.transitions.items() for t in out.targets],
        "gates": [{"node": node, "gate": g.name, "when": g.when, "role": g.role,
                   "on_reject": g.on_reject, "on_timeout": g.on_timeout, "on_stale": g.on_stale,
                   "editable": list(g.editable)} for node, g in machine.gates.items()],
        "budget": None if budget is None else {
            "escalate_to": budget.escalate_to, "max_steps": budget.max_steps,
            "max_visits": dict(budget.max_visits), "max_tokens": budget.max_tokens,
            "max_cost_usd": budget.max_cost_usd, "limits": budget.limits()},
        "proof": machine.proof.lines() if machine.proof else None,
        "mermaid": to_mermaid(machine),
    }

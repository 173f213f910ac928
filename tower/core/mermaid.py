"""Draw a Machine as a Mermaid state diagram: the real graph, not a hand-drawn copy."""

from __future__ import annotations

from tower.core.graph import DONE, FAILED, START, Machine
from tower.core.moves import gate_exits, labelled_moves


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

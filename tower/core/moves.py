"""The moves a machine declares, labelled as every picture of it shows them (Mermaid, DOT)."""

from __future__ import annotations

from collections.abc import Iterator

from tower.core.gates import Gate
from tower.core.graph import Machine


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

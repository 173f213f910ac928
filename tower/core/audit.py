"""Properties every transition log must have, checked on recorded runs.

Pure: no Temporal. ``tower replay`` and the replay tests run ``check_log`` on the
log each history produces when replayed against the current code, so a code
change that would let a run take a move its graph does not allow fails CI.
"""

from __future__ import annotations

from collections.abc import Sequence

from tower.core.graph import DONE, FAILED, START, Machine
from tower.core.transition import Transition


def check_log(machine: Machine, log: Sequence[Transition]) -> list[str]:
    """Every way ``log`` breaks the rules, as readable sentences; empty when it is sound.

    The rules: steps strictly increase; each move is declared by ``machine``; a move
    starts where the previous one ended; DONE and FAILED are never left (a failed run is
    retried by a Temporal reset: a new run, with its own log).
    """
    problems: list[str] = []
    previous: Transition | None = None
    for t in log:
        where = f"step {t.step} ({t.source} -> {t.target})"
        if previous is None:
            # A run continued-as-new carries its step count on; only step 1 must be START.
            if t.step == 1 and t.source != START:
                problems.append(f"{where}: the log does not begin at {START}")
        else:
            if t.step <= previous.step:
                problems.append(f"{where}: step does not increase (previous step "
                                f"{previous.step})")
            if t.source != previous.target:
                problems.append(f"{where}: starts at {t.source} but the run was at "
                                f"{previous.target}")
        if t.source in (DONE, FAILED):
            problems.append(f"{where}: {t.source} was left (reason {t.reason!r})")
        elif not machine.declared(t.source, t.target):
            problems.append(f"{where}: not a transition declared by {machine.name}'s graph")
        previous = t
    return problems

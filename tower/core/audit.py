"""Properties every transition log must have, checked on recorded runs.

Pure: no Temporal. ``tower replay`` and the replay tests run ``check_log`` on the
log each history produces when replayed against the current code, so a code
change that would let a run take a move its graph does not allow fails CI.
"""

from __future__ import annotations

from collections.abc import Sequence

from tower.core.graph import DONE, FAILED, START, Machine
from tower.core.transition import Kind, Transition


def check_log(machine: Machine, log: Sequence[Transition]) -> list[str]:
    """Every way ``log`` breaks the rules, as readable sentences; empty when it is sound.

    The rules: steps strictly increase; each move is declared by ``machine`` (the
    operator's retry out of FAILED is the only exception); a move starts where the
    previous one ended; DONE is never left; FAILED is left only by an operator.
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
        operator = t.kind == Kind.OPERATOR
        if t.source == DONE:
            problems.append(f"{where}: DONE was left")
        elif t.source == FAILED and not operator:
            problems.append(f"{where}: FAILED was left without an operator decision "
                            f"(reason {t.reason!r})")
        elif not (t.source == FAILED or machine.declared(t.source, t.target)):
            problems.append(f"{where}: not a transition declared by {machine.name}'s graph")
        previous = t
    return problems

"""Properties every transition log must have, checked on recorded runs (``tower replay``
and the replay tests), so a change that would let a run take an undeclared move fails CI.
"""

from __future__ import annotations

from collections.abc import Sequence

from tower.contract.decisions import GateStatus
from tower.core.engine import Kind, Transition
from tower.core.gates import Gate
from tower.core.graph import DONE, FAILED, START, TERMINALS, Machine
from tower.core.state import AgentState


def check_log(machine: Machine, log: Sequence[Transition],
              states: Sequence[AgentState] | None = None) -> list[str]:
    """Every way ``log`` breaks the rules, as sentences; empty when it is sound.

    Steps strictly increase; each move is declared and starts where the last ended; DONE and
    FAILED are never left; no move enters a node past its visit or step budget (but the
    escalation). With ``states`` (the state after each move), also the graph's proof: no
    side-effecting node ran without a gate it is behind approving it (or finding no decision
    needed), and no node ran before a gate it must come after."""
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
    problems += _budgets(machine, log, states)
    if states is not None and machine.proof is not None:
        problems += _gates(machine, log, states)
    return problems


def _enters(t: Transition) -> bool:
    """Whether ``t`` enters a node (a visit), not a gate holding the run where it is."""
    return t.target not in TERMINALS and t.target != START and not (
        t.kind == Kind.GATE and t.target == t.source)


def _budgets(machine: Machine, log: Sequence[Transition],
             states: Sequence[AgentState] | None) -> list[str]:
    budget = machine.budget
    if budget is None:
        return []
    problems: list[str] = []
    counted: dict[str, int] = {}  # visits in this log (all of them, without states)
    for i, t in enumerate(log):
        if not _enters(t):
            continue
        counted[t.target] = counted.get(t.target, 0) + 1
        if t.kind == Kind.BUDGET or t.source == START:
            continue
        where = f"step {t.step} ({t.source} -> {t.target})"
        if budget.max_steps is not None and t.step > budget.max_steps:
            problems.append(f"{where}: past the step budget ({budget.max_steps} steps)")
        limit = budget.max_visits.get(t.target)
        visits = states[i].visits.get(t.target, 0) if states is not None else counted[t.target]
        if limit is not None and visits > limit:
            problems.append(f"{where}: visit {visits} of {t.target}, past its budget of "
                            f"{limit}")
    return problems


def _gates(machine: Machine, log: Sequence[Transition],
           states: Sequence[AgentState]) -> list[str]:
    """Walk the run: a gate is cleared when its node ran with that visit's request approved
    or none needed; a new visit, or a request ending otherwise, clears it no longer."""
    proof = machine.proof
    assert proof is not None
    by_node = dict(machine.gates)
    # A continued run's earlier approvals are in its earlier run's history, not here.
    continued = bool(log) and log[0].step != 1
    cleared = {g.name: continued for g in by_node.values()}
    problems: list[str] = []
    for i, t in enumerate(log):
        gate = by_node.get(t.source)
        ran = t.source in machine.nodes and t.kind != Kind.GATE
        if gate is not None and t.kind == Kind.GATE and t.target != t.source:
            cleared[gate.name] = False  # rejected, expired, stale or failed its re-check
        if ran and gate is not None:
            before = states[i - 1] if i > 0 else states[i]
            cleared[gate.name] = _cleared(gate, t.source, before, states[i])
        if ran:
            where = f"step {t.step} ({t.source} -> {t.target})"
            effect = proof.effect(t.source)
            if (effect is not None and effect.ungated is None
                    and not any(cleared[g] for g in effect.behind)):
                problems.append(f"{where}: {t.source} ran its side-effecting tools without "
                                f"an approval of gate {' or '.join(effect.behind)}")
            for node, name in proof.requires:
                if node == t.source and not cleared[name]:
                    problems.append(f"{where}: {node} ran before gate {name} approved it")
        entered = by_node.get(t.target)
        if entered is not None and _enters(t):
            cleared[entered.name] = False  # a new visit: its own request, or none needed
    return problems


def _cleared(gate: Gate, node: str, before: AgentState, after: AgentState) -> bool:
    """Whether ``gate`` let this visit of ``node`` run (judged on the state it was judged on)."""
    visit = before.visits.get(node, 0)
    records = [r for r in before.approvals if r.gate == gate.name and r.visit == visit]
    if records:
        return records[-1].status == GateStatus.APPROVED
    return not gate.needed(before if gate.when == "before" else after)

"""One step of the machine: routes, guards, budgets, terminals and the transition log."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import pytest

from tower import ADD, DONE, FAILED, AgentState, Graph
from tower.contract.failures import IllegalTransition
from tower.core.engine import advance, start
from tower.core.graph import Machine
from tower.core.state import Status

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Loop(AgentState):
    choice: str = "work"
    done_ok: bool = True
    rounds: Annotated[int, ADD] = 0


async def noop(ctx: object, state: Loop) -> dict[str, object]:
    return {}


def choose(state: Loop) -> str:
    return state.choice


def finished(state: Loop) -> bool:
    return state.done_ok


def machine(*, escalate_back: bool = False, **budget: object) -> Machine:
    # Without a visit or step budget the loop is bounded by the test's own updates (a graph
    # must say so: tower/core/proofs.py).
    loose = None if budget.get("max_visits") or budget.get("max_steps") else "the test ends it"
    g = (Graph("loop", Loop).node("plan", noop, unbounded=loose).node("work", noop)
         .entry("plan")
         .route("plan", choose, ["work", DONE], guards={DONE: finished})
         .edge("work", "plan"))
    if budget:
        # The escalation node either ends the run or (a bad design) tries to go on.
        g = (g.node("escalate", noop).edge("escalate", "plan" if escalate_back else FAILED)
             .budget(escalate_to="escalate", **budget))  # type: ignore[arg-type]
    return g.compile()


def started(m: Machine, **fields: Any) -> Loop:
    state, first = start(m, Loop(**fields), at=T0, event_id=3)
    assert (first.step, first.source, first.target, first.reason) == (1, "START", "plan", "start")
    return state


def test_route_guard_and_log_entry() -> None:
    m = machine()
    s = started(m)
    s, t = advance(m, s, "plan", {"rounds": 1}, at=T0, event_id=9, calls=["model:x"])
    assert (s.node, s.step, s.rounds, s.status) == ("work", 2, 1, Status.RUNNING)
    assert (t.step, t.source, t.target, t.event_id, t.calls) == (2, "plan", "work", 9, ["model:x"])
    assert t.reason == "route choose -> work" and t.update == {"rounds": 1} and t.at == T0
    s, _ = advance(m, s, "work", {"choice": DONE}, at=T0, event_id=12)
    s, t = advance(m, s, "plan", {}, at=T0, event_id=15)
    assert (s.node, s.status) == (DONE, Status.DONE)
    assert t.reason == "route choose -> DONE, guard finished held"


def test_undeclared_route_target_fails_the_run_and_never_moves_there() -> None:
    m = machine(max_steps=50)
    s = started(m, choice="escalate")
    s, t = advance(m, s, "plan", {"rounds": 1}, at=T0, event_id=5)
    assert (s.node, s.status, t.target) == (FAILED, Status.FAILED, FAILED)
    assert "route choose returned an undeclared target" in t.reason
    assert s.errors == [t.reason] and s.visits.get("escalate") is None


def test_failing_guard_fails_the_run() -> None:
    m = machine()
    s = started(m, choice=DONE, done_ok=False)
    s, t = advance(m, s, "plan", {}, at=T0, event_id=5)
    assert s.status == Status.FAILED and "guard finished failed" in t.reason


def test_bad_update_fails_with_the_state_unchanged_but_for_the_error() -> None:
    m = machine()
    s = started(m)
    after, t = advance(m, s, "plan", {"rounds": "lots"}, at=T0, event_id=5)
    assert after.status == Status.FAILED and after.rounds == 0
    assert "bad update from plan" in t.reason


def test_done_and_failed_are_never_left() -> None:
    # A failed run goes on only as a new run (`tower retry` resets it), never by a move.
    m = machine()
    s = started(m, choice=DONE)
    s, _ = advance(m, s, "plan", {}, at=T0, event_id=5)
    with pytest.raises(IllegalTransition, match="DONE is terminal"):
        advance(m, s, "plan", {}, at=T0, event_id=6)
    failed, _ = advance(m, started(m, choice="nowhere"), "plan", {}, at=T0, event_id=5)
    assert failed.node == FAILED
    with pytest.raises(IllegalTransition, match="FAILED is terminal"):
        advance(m, failed, "plan", {}, at=T0, event_id=6)


def test_visit_budget_escalates_then_fails_instead_of_looping() -> None:
    m = machine(max_visits={"plan": 3})
    s = started(m)
    log = []
    for _ in range(20):
        if s.node in (DONE, FAILED):
            break
        s, t = advance(m, s, s.node, {}, at=T0, event_id=0)
        log.append(t)
    assert [t.target for t in log] == ["work", "plan", "work", "plan", "work", "escalate", FAILED]
    assert log[-2].reason == "loop budget exceeded (plan visited 3 times)"
    assert s.status == Status.FAILED and s.visits["plan"] == 3
    assert [t.step for t in log] == list(range(2, 9)), "steps strictly increase by one"
    once = machine(max_visits={"plan": 1})
    s, reasons = started(once), []
    while s.node not in (DONE, FAILED):
        s, t = advance(once, s, s.node, {}, at=T0, event_id=0)
        reasons.append(t.reason)
    assert "loop budget exceeded (plan visited 1 time)" in reasons  # not "1 times"


def test_step_budget_escalates_and_a_second_escalation_fails() -> None:
    m = machine(max_steps=4)
    s = started(m)
    targets = []
    while s.node not in (DONE, FAILED):
        s, t = advance(m, s, s.node, {}, at=T0, event_id=0)
        targets.append((t.target, t.reason))
    assert [t for t, _ in targets] == ["work", "plan", "work", "escalate", FAILED]
    assert targets[3][1] == "step budget exceeded (4 steps)"
    again = machine(escalate_back=True, max_steps=4)
    s = started(again)
    targets = []
    while s.node not in (DONE, FAILED):
        s, t = advance(again, s, s.node, {}, at=T0, event_id=0)
        targets.append((t.target, t.reason))
    assert [t for t, _ in targets] == ["work", "plan", "work", "escalate", FAILED]
    assert targets[-1][1] == "step budget exceeded (4 steps)", "escalating twice ends the run"

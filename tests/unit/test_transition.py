"""The one move function: every kind of move carries its kind, the audit reads the kind
(never the reason text), and transitions recorded before kinds existed still read right."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tower import DONE, FAILED, AgentState, Graph
from tower.contract.decisions import GateStatus
from tower.core.audit import check_log
from tower.core.carry import Carry
from tower.core.engine import (
    Kind,
    Transition,
    advance,
    node_error,
    operator_abort,
    operator_retry,
    start,
)
from tower.core.errors import IllegalTransition
from tower.core.events import Event, apply_event, guard_rows
from tower.core.gates import Gate, close_gate, open_gate
from tower.core.transition import legacy_kind, move

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class S(AgentState):
    go: str = "b"
    flag: bool = False


async def noop(ctx: object, state: S) -> dict[str, object]:
    return {}


def pick(state: S) -> str:
    return state.go


def flagged(state: S) -> bool:
    return state.flag


GRAPH = (Graph("kinds", S).node("a", noop).node("b", noop).node("esc", noop)
         .entry("a").route("a", pick, ["b", DONE]).edge("b", "a").edge("esc", FAILED)
         .gate("b", Gate(name="g", role="boss", timeout=timedelta(hours=1), on_reject="esc",
                         on_timeout="esc"))
         .budget(escalate_to="esc", max_visits={"b": 1})
         .compile())


def test_each_move_of_a_node_driven_run_says_what_made_it() -> None:
    s, t1 = start(GRAPH, S(), at=T0, event_id=1)
    s, t2 = advance(GRAPH, s, "a", {}, at=T0, event_id=2)  # route a -> b
    s, t3 = open_gate(GRAPH, s, GRAPH.gates["b"], at=T0, event_id=3, run_id="run-id-1")
    assert s.visits["b"] == 1, "holding at the gate's node is not a visit"
    s, t4 = close_gate(GRAPH, s, GRAPH.gates["b"], GateStatus.APPROVED, target="b", at=T0,
                       event_id=4)
    s, t5 = advance(GRAPH, s, "b", {}, at=T0, event_id=5)  # edge b -> a
    s, t6 = advance(GRAPH, s, "a", {}, at=T0, event_id=6)  # b again: over its budget
    s, t7 = advance(GRAPH, s, "esc", {}, at=T0, event_id=7)  # edge esc -> FAILED
    s, t8 = operator_retry(GRAPH, s, "esc", "ops", at=T0, event_id=8)
    s, t9 = node_error(GRAPH, s, "esc", "boom", at=T0, event_id=9)
    _, t10 = operator_abort(GRAPH, s, "ops", "", at=T0, event_id=10)
    log = [t1, t2, t3, t4, t5, t6, t7, t8, t9, t10]
    assert [(t.source, t.target, t.kind) for t in log] == [
        ("START", "a", Kind.NODE), ("a", "b", Kind.ROUTE), ("b", "b", Kind.GATE),
        ("b", "b", Kind.GATE), ("b", "a", Kind.NODE), ("a", "esc", Kind.BUDGET),
        ("esc", FAILED, Kind.NODE), (FAILED, "esc", Kind.OPERATOR), ("esc", FAILED, Kind.NODE),
        (FAILED, FAILED, Kind.OPERATOR)]
    assert (t8.reason, t10.reason) == ("retry by ops", "abort by ops")
    assert check_log(GRAPH, log) == []


def test_an_accepted_event_is_an_event_move() -> None:
    g = Graph("ev", S).node("a", noop).entry("a")
    machine = guard_rows(g, "a", {DONE: flagged}).compile()
    s, _ = start(machine, S(), at=T0, event_id=1)
    _, t = apply_event(machine, s, Event(step=1, data={"flag": True}), {"flag": True},
                       accepted=set(), at=T0, event_id=2)
    assert (t.target, t.kind) == (DONE, Kind.EVENT)


def test_leaving_failed_needs_the_operator_kind_not_the_word() -> None:
    failed = S(step=3, node=FAILED)
    with pytest.raises(IllegalTransition, match="not declared"):
        move(GRAPH, failed, FAILED, "a", Kind.NODE, "operator: retry by mallory", at=T0,
             event_id=1)
    pretend = Transition(step=4, source=FAILED, target="a", reason="operator: retry by x",
                         kind=Kind.NODE, at=T0)
    base = [Transition(step=1, source="START", target="a", reason="start", at=T0),
            Transition(step=2, source="a", target=FAILED, reason="boom", at=T0)]
    assert check_log(GRAPH, [*base, pretend]) == [
        "step 4 (FAILED -> a): FAILED was left without an operator decision "
        "(reason 'operator: retry by x')"]


@pytest.mark.parametrize(("reason", "kind"), [
    ("start", Kind.NODE), ("edge", Kind.NODE), ("edge, guard has_profile held", Kind.NODE),
    ("route after_reason -> issue_refund", Kind.ROUTE),
    ("loop budget exceeded (reason visited 3 times)", Kind.BUDGET),
    ("step budget exceeded (40 steps)", Kind.BUDGET),
    ("recovery exhausted (loop budget exceeded (a visited 2 times)); last error: x", Kind.NODE),
    ("gate refund_review: approved by alice (manager, signed)", Kind.GATE),
    ("event 1a2b3c4d (signal): route guards -> PLANNING, guard start_is_true held", Kind.EVENT),
    ("operator: retry by ops", Kind.OPERATOR), ("error in b: boom", Kind.NODE),
])
def test_old_records_without_a_kind_get_the_kind_their_reason_meant(
        reason: str, kind: Kind) -> None:
    assert legacy_kind(reason) == kind
    old = {"step": 2, "source": "a", "target": "b", "reason": reason, "at": T0.isoformat()}
    assert Transition.model_validate(old).kind == kind


def test_a_carried_log_recorded_before_kinds_reads_back_with_them() -> None:
    # The shape a continued-as-new run put into its history before this version.
    old = {"state": {}, "log": {"recent": [
        {"step": 7, "source": FAILED, "target": "a", "reason": "operator: retry by ops",
         "update": {}, "at": "2026-01-01T00:00:00Z", "event_id": 40, "calls": []}]}}
    (t,) = Carry.model_validate(old).log.recent
    assert t.kind == Kind.OPERATOR
    assert Transition.model_validate(t.model_dump(mode="json")).kind == Kind.OPERATOR

"""The one move function: every kind of move carries its kind, and the audit reads the
moves (never the reason text)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tower import DONE, FAILED, AgentState, Graph
from tower.contract.decisions import GateStatus
from tower.contract.failures import IllegalTransition
from tower.core.audit import check_log
from tower.core.engine import (
    Kind,
    Transition,
    advance,
    move,
    node_error,
    start,
)
from tower.core.events import Event, apply_event
from tower.core.gates import Gate, close_gate, open_gate

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
    _, t7 = node_error(GRAPH, s, "esc", "boom", at=T0, event_id=7)  # no recovery: FAILED
    log = [t1, t2, t3, t4, t5, t6, t7]
    assert [(t.source, t.target, t.kind) for t in log] == [
        ("START", "a", Kind.NODE), ("a", "b", Kind.ROUTE), ("b", "b", Kind.GATE),
        ("b", "b", Kind.GATE), ("b", "a", Kind.NODE), ("a", "esc", Kind.BUDGET),
        ("esc", FAILED, Kind.NODE)]
    assert check_log(GRAPH, log) == []


def test_an_accepted_event_is_an_event_move() -> None:
    g = Graph("ev", S).node("a", noop).entry("a")
    machine = g.guard_rows("a", {DONE: flagged}).compile()
    s, _ = start(machine, S(), at=T0, event_id=1)
    _, t = apply_event(machine, s, Event(step=1, data={"flag": True}), {"flag": True},
                       accepted=set(), at=T0, event_id=2)
    assert (t.target, t.kind) == (DONE, Kind.EVENT)


def test_failed_is_never_left_whatever_the_reason_says() -> None:
    failed = S(step=3, node=FAILED)
    with pytest.raises(IllegalTransition, match="not declared"):
        move(GRAPH, failed, FAILED, "a", Kind.NODE, "operator: retry by mallory", at=T0,
             event_id=1)
    pretend = Transition(step=4, source=FAILED, target="a", reason="operator: retry by x",
                         kind=Kind.NODE, at=T0)
    base = [Transition(step=1, source="START", target="a", reason="start", at=T0),
            Transition(step=2, source="a", target=FAILED, reason="boom", at=T0)]
    assert check_log(GRAPH, [*base, pretend]) == [
        "step 4 (FAILED -> a): FAILED was left (reason 'operator: retry by x')"]


def test_a_record_without_a_kind_is_a_node_move_whatever_its_reason() -> None:
    # Meaning is never read from the reason text (it is for people).
    old = {"step": 2, "source": "a", "target": "b", "reason": "gate g: approved",
           "at": T0.isoformat()}
    assert Transition.model_validate(old).kind == Kind.NODE

"""The event-driven engine, without a server: the lifecycle guard table, exactly, and
random event sequences (duplicates, stale steps, nonsense) against its promises."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import event as note_event
from hypothesis import given
from hypothesis import strategies as st

from tower import DONE, FAILED
from tower.contract.failures import IllegalTransition
from tower.core.engine import Transition, start
from tower.core.events import Event, EventRejected, apply_event
from tower.core.graph import START, TERMINALS
from workflows.lifecycle import (
    GRAPH,
    MAX_RECOVERIES,
    MAX_STEPS,
    LifecycleEvent,
    LifecycleState,
    on_event,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TABLE = {
    ("IDLE", "PLANNING"), ("PLANNING", "TOOL_CALL"), ("TOOL_CALL", "EVALUATING"),
    ("TOOL_CALL", "RECOVERING"), ("EVALUATING", "PLANNING"), ("EVALUATING", DONE),
    ("RECOVERING", "PLANNING"), ("RECOVERING", FAILED),
}
CANON: dict[str, dict[str, Any]] = {  # one typical event per kind
    "start": {"start": True}, "tool": {"tool": "lookup_account"}, "done": {"tool_done": True},
    "error": {"error": "boom"}, "unsolved": {"solved": False}, "solved": {"solved": True},
    "recovered": {"recovered": True}, "unrecovered": {"recovered": False},
}
EXPECTED = {  # (state, event kind) -> target; every other pair is refused
    ("IDLE", "start"): "PLANNING", ("PLANNING", "tool"): "TOOL_CALL",
    ("TOOL_CALL", "done"): "EVALUATING", ("TOOL_CALL", "error"): "RECOVERING",
    ("EVALUATING", "unsolved"): "PLANNING", ("EVALUATING", "solved"): DONE,
    ("RECOVERING", "recovered"): "PLANNING", ("RECOVERING", "unrecovered"): FAILED,
}


def at(node: str, **fields: Any) -> LifecycleState:
    base: dict[str, Any] = {"goal": "g", "node": node, "step": 5, "errors": ["boom"],
                            "recoveries": 1}
    return LifecycleState(**(base | fields))


def send(state: LifecycleState, data: dict[str, Any], accepted: frozenset[str] = frozenset(),
         step: int | None = None) -> tuple[LifecycleState, Transition, Event]:
    parsed = LifecycleEvent(step=state.step if step is None else step, **data)
    event = Event(step=parsed.step, data=parsed.model_dump(mode="json", exclude={"step"},
                                                            exclude_defaults=True))
    new, t = apply_event(GRAPH, state, event, on_event(state, parsed), accepted=accepted,
                         at=T0, event_id=1)
    return new, t, event


@pytest.mark.parametrize("node", ["IDLE", "PLANNING", "TOOL_CALL", "EVALUATING", "RECOVERING"])
@pytest.mark.parametrize("kind", sorted(CANON))
def test_the_guard_table_is_the_entire_control_flow(node: str, kind: str) -> None:
    state = at(node, plans=[{"name": "lookup_account"}])
    target = EXPECTED.get((node, kind))
    if target is None:
        with pytest.raises(IllegalTransition, match="no guard admits"):
            send(state, CANON[kind])
        return
    new, t, _ = send(state, CANON[kind])
    assert (t.source, t.target, new.node, new.step) == (node, target, target, 6)


def test_recovery_is_bounded_by_the_guards_not_the_sender() -> None:
    spent = at("RECOVERING", recoveries=MAX_RECOVERIES + 1)
    _, t, _ = send(spent, {"recovered": True})  # an over-eager sender cannot retry forever
    assert t.target == FAILED and "recovery_exhausted held" in t.reason
    with pytest.raises(IllegalTransition):  # exhausted, but no error recorded: refused
        send(spent.model_copy(update={"errors": []}), {"recovered": False})


def test_duplicate_and_stale_events_change_nothing() -> None:
    state = at("IDLE")
    new, _, event = send(state, {"start": True})
    with pytest.raises(EventRejected, match="duplicate event"):
        send(state, {"start": True}, accepted=frozenset({event.key}))
    with pytest.raises(EventRejected, match="event for step 5, but the run is at step 6"):
        send(new, {"tool": "lookup_account"}, step=state.step)
    assert Event(step=1, data={"a": 1, "b": 2}).key == Event(step=1, data={"b": 2, "a": 1}).key
    assert Event(step=1, data={"a": 1}).key != Event(step=2, data={"a": 1}).key


def test_terminal_runs_take_no_events() -> None:
    for node in (DONE, FAILED):
        with pytest.raises(IllegalTransition, match="terminal"):
            send(at(node), {"start": True})


events = st.fixed_dictionaries({}, optional={
    "start": st.booleans(), "tool": st.sampled_from(["lookup_account", "search_docs", ""]),
    "tool_done": st.booleans(), "error": st.sampled_from(["boom", ""]),
    "solved": st.booleans(), "recovered": st.booleans(), "answer": st.just("ok"),
})


# What the state's own entry action or a well-behaved sender would say, with noise.
LIKELY = {
    "IDLE": st.fixed_dictionaries({"start": st.booleans()}),
    "PLANNING": st.fixed_dictionaries({"tool": st.sampled_from(["lookup_account", ""])}),
    "TOOL_CALL": st.one_of(st.fixed_dictionaries({"tool_done": st.booleans()}),
                           st.fixed_dictionaries({"error": st.sampled_from(["boom", ""])})),
    "EVALUATING": st.fixed_dictionaries({"solved": st.booleans()}),
    "RECOVERING": st.fixed_dictionaries({"recovered": st.booleans()}),
}


@given(st.data())
def test_random_event_sequences_keep_the_promises(data: st.DataObject) -> None:
    state, first = start(GRAPH, LifecycleState(goal="g"), at=T0, event_id=0)
    log = [first]
    accepted: set[str] = set()
    sent: list[tuple[dict[str, Any], int]] = []
    for _ in range(data.draw(st.integers(0, 80))):
        how = data.draw(st.sampled_from(["likely", "likely", "random", "stale", "replay"]))
        if how == "replay" and sent:  # at-least-once delivery: an accepted event comes again
            payload, step = data.draw(st.sampled_from(sent))
        else:
            pool = LIKELY.get(state.node, events) if how == "likely" else events
            payload = data.draw(pool)
            now = state.step

            def other(n: int, now: int = now) -> bool:  # ``now`` bound per iteration
                return n != now

            step = now if how != "stale" else data.draw(st.integers(0, now + 3).filter(other))
        before = state
        try:
            state, t, event = send(state, payload, frozenset(accepted), step=step)
        except (EventRejected, IllegalTransition):
            assert state == before  # a refused event changes nothing
            continue
        assert event.key not in accepted  # never accepted twice
        accepted.add(event.key)
        sent.append((payload, step))
        log.append(t)
    steps = [t.step for t in log]
    assert steps == list(range(1, len(log) + 1)) and state.step == steps[-1]
    assert (log[0].source, log[0].target) == (START, "IDLE")
    for t in log[1:]:
        assert t.source not in TERMINALS  # DONE is never left; FAILED only by an operator
        budget = t.target == FAILED and "budget exceeded" in t.reason
        assert (t.source, t.target) in TABLE or budget, f"not in the table: {t}"
    assert state.recoveries <= MAX_RECOVERIES + 1 and len(log) <= MAX_STEPS + 1
    note_event(f"ended in {state.node}")  # --hypothesis-show-statistics: how deep runs got

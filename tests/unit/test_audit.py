"""The transition-log rules `tower replay` checks on every history, without a server."""

from __future__ import annotations

from datetime import UTC, datetime

from tower import DONE, FAILED
from tower.core.audit import check_log
from tower.core.engine import Transition, advance, start
from workflows.account import GRAPH, AccountState

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def move(step: int, source: str, target: str, reason: str = "edge") -> Transition:
    return Transition(step=step, source=source, target=target, reason=reason, at=T0)


GOOD = [move(1, "START", "reason", "start"), move(2, "reason", "lookup_account"),
        move(3, "lookup_account", "reason"), move(4, "reason", DONE)]


def test_a_log_the_engine_writes_is_sound() -> None:
    state, t1 = start(GRAPH, AccountState(), at=T0, event_id=3)
    state, t2 = advance(GRAPH, state, "reason", {"answer": "ok"}, at=T0, event_id=9)
    assert check_log(GRAPH, [t1, t2]) == [] and t2.target == DONE
    assert check_log(GRAPH, GOOD) == []


def test_steps_must_strictly_increase() -> None:
    log = [*GOOD[:2], move(2, "lookup_account", "reason")]
    assert check_log(GRAPH, log) == [
        "step 2 (lookup_account -> reason): step does not increase (previous step 2)"]


def test_undeclared_move_is_named() -> None:
    log = [*GOOD[:2], move(3, "lookup_account", DONE)]
    assert check_log(GRAPH, log) == [
        "step 3 (lookup_account -> DONE): not a transition declared by account's graph"]


def test_moves_must_chain() -> None:
    log = [GOOD[0], move(2, "lookup_account", "reason")]
    assert check_log(GRAPH, log) == [
        "step 2 (lookup_account -> reason): starts at lookup_account but the run was at reason"]


def test_done_is_never_left() -> None:
    problems = check_log(GRAPH, [*GOOD, move(5, DONE, "reason", "operator: retry by ann")])
    assert problems == [
        "step 5 (DONE -> reason): DONE was left (reason 'operator: retry by ann')"]


def test_failed_is_never_left() -> None:
    # A failed run goes on only as a new run (`tower retry` resets it), with its own log.
    failed = [GOOD[0], move(2, "reason", FAILED, "bad update")]
    assert check_log(GRAPH, failed) == []
    assert check_log(GRAPH, [*failed, move(3, FAILED, "reason", "operator: retry by ann")]) == [
        "step 3 (FAILED -> reason): FAILED was left (reason 'operator: retry by ann')"]


def test_a_log_must_begin_at_start_unless_it_was_carried_over() -> None:
    assert check_log(GRAPH, GOOD[1:]) == []  # continued-as-new: steps carry on from 2
    assert check_log(GRAPH, [move(1, "reason", "lookup_account")]) == [
        "step 1 (reason -> lookup_account): the log does not begin at START"]

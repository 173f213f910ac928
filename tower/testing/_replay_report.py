"""What went wrong in a replay, in words: the history event a failure happened at, and
where the replayed path left the one the original run published."""

from __future__ import annotations

import re
from collections.abc import Sequence

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory

from tower.core.transition import Transition


def task_completed_after(history: WorkflowHistory, event_id: int) -> HistoryEvent | None:
    """The WorkflowTaskCompleted event that closed the task a step was recorded in.

    A transition's ``event_id`` is the history length while its workflow task ran,
    i.e. that task's WorkflowTaskStarted event; the task's completion comes next.
    """
    for event in history.events:
        if (event.event_id > event_id
                and event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED):
            return event
    return None


def diverged(recorded: list[tuple[int, str]], log: list[Transition]) -> list[str]:
    """Where the replayed log disagrees with what the original run published."""
    targets = {t.step: t.target for t in log}
    first = log[0].step if log else 1
    for step, node in recorded:
        if step < first:
            continue  # published from the state a continued-as-new run carried over
        if step not in targets:
            return [f"replay stopped early: the original run was at {node} after step {step}, "
                    f"the current code never makes step {step}"]
        if targets[step] != node:
            return [f"replay took a different path: the original run was at {node} after step "
                    f"{step}, the current code is at {targets[step]}"]
    return []




_EVENT_ID = re.compile(r"HistoryEvent\(id: (\d+)|event[_ ]id:? (\d+)", re.IGNORECASE)
_SCHEDULED = re.compile(r"scheduled event '([^']+)'")
_CORE_MESSAGE = re.compile(r'message: "((?:[^"\\]|\\.)*)"')


def describe_failure(
    history: WorkflowHistory, exc: BaseException, log: Sequence[Transition] = (),
) -> str:
    """The cause, with the history event it happened at (named by id and type)."""
    text = str(exc).strip() or type(exc).__name__
    inner = _CORE_MESSAGE.search(text)  # the SDK core wraps its message in a debug dump
    cause = f"{type(exc).__name__}: {inner.group(1) if inner else text}"
    if exc.__cause__ is not None and str(exc.__cause__) not in text:
        cause += f" (caused by {type(exc.__cause__).__name__}: {exc.__cause__})"
    event_id, exact = _failed_event(history, text, log)
    if event_id is None:
        return cause
    kind = {e.event_id: EventType.Name(e.event_type) for e in history.events}.get(event_id, "?")
    where = "at event" if exact else "after the last reproduced workflow task, at event"
    return f"{where} {event_id} ({kind.removeprefix('EVENT_TYPE_')}): {cause}"


def _failed_event(
    history: WorkflowHistory, text: str, log: Sequence[Transition],
) -> tuple[int | None, bool]:
    found = _EVENT_ID.search(text)
    if found:
        return int(found.group(1) or found.group(2)), True
    # The mismatch lies after the last step the current code did reproduce.
    after = log[-1].event_id if log else 0
    named = _SCHEDULED.search(text)
    if named:
        for e in history.events:
            if (e.event_id > after
                    and e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                    and e.activity_task_scheduled_event_attributes.activity_type.name
                    == named.group(1)):
                return e.event_id, True
    completed = task_completed_after(history, after)
    if completed is not None and completed.event_id < history.events[-1].event_id:
        return completed.event_id + 1, False
    return None, False

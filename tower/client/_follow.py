"""Follow a run: its transitions as they happen, then how it ended, and why::

    async for seen in follow(handle):
        print(seen)  # each Transition, then the RunEnd (status, reason)

It ends on every terminal outcome, including executions that closed without reaching a
terminal node (terminated, timed out, canceled, failed before its first step): each poll
asks the server first (no worker needed), then the run. A run whose agent refused its
input raises ``NeverStarted``. The status is read *before* the log, so the last moves of a
run that ends while followed are yielded before its end; a run is asked nothing before its
first workflow task completes (a query in that task would fail the task).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    WorkflowExecutionDescription,
    WorkflowHandle,
    WorkflowQueryFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from tower.client._runs import check_started, closed, describe, failure_of, replay_closed, status_of
from tower.client.errors import ClientError, RunNotFound
from tower.contract import names, search
from tower.core.engine import Transition

AGENT_ENDS = frozenset({"DONE", "FAILED"})
PAUSED = "AWAITING_APPROVAL"


@dataclass(frozen=True)
class Position:
    """Where the run stands at one poll: what a progress line shows."""

    status: str
    step: int
    node: str


@dataclass(frozen=True)
class RunEnd:
    """Where following stopped. ``closed``: the execution ended; ``status`` is the agent's
    last word (DONE, FAILED) or the execution's, and ``reason`` why it did not complete. Not
    closed: paused at a gate, or ``idle`` (waiting for a signal or an update)."""

    run: str
    status: str
    step: int
    node: str
    closed: bool
    reason: str | None = None
    idle: bool = False

    @property
    def failed(self) -> bool:
        """The run ended without completing its work."""
        return self.closed and self.status != "DONE"


async def follow(
    handle: WorkflowHandle[Any, Any], *, skip: int = 0, stop_at_pause: bool = True,
    stop_when_idle: bool = False, poll_seconds: float = 0.25, timeout: float | None = None,
    on_poll: Callable[[Position], None] | None = None, workflows: Sequence[type] = (),
) -> AsyncIterator[Transition | RunEnd]:
    """Yield the run's transitions (after the first ``skip``) as they happen, then its
    ``RunEnd``; stop at a gate when ``stop_at_pause``, when nothing inside the run is pending
    if ``stop_when_idle``; ``timeout`` seconds (ClientError). ``workflows`` (the project's
    agents) read a closed run's log from its history when no worker answers."""
    info = await describe(handle)
    seen, position = skip, Position("STARTING", 0, "START")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout if timeout is not None else None
    began = False
    while True:
        began = began or await has_begun(handle)
        polled = await _poll(handle, workflows, began)
        if polled is not None:
            status, log, info = polled
            for t in log[seen:]:
                yield t
            moved = len(log) > seen
            seen = max(seen, len(log))
            at = (log[-1].step, log[-1].target) if log else (position.step, position.node)
            position = Position(status, *at)
            if on_poll is not None:
                on_poll(position)
            end = await _end(handle, info, position, moved, stop_at_pause, stop_when_idle)
            if end is not None:
                yield end
                return
        if deadline is not None and timeout is not None and loop.time() > deadline:
            raise ClientError(f"run {handle.id!r} still {position.status} after {timeout:g}s")
        await asyncio.sleep(poll_seconds)


async def _end(handle: WorkflowHandle[Any, Any], info: WorkflowExecutionDescription,
               at: Position, moved: bool, stop_at_pause: bool, stop_when_idle: bool
               ) -> RunEnd | None:
    # At DONE or FAILED the task that got there closes the execution: its end is certain.
    if closed(info) or at.status in AGENT_ENDS:
        await check_started(handle, info)  # refused its input: not an end, no step taken
        reason = None if at.status == "DONE" else await failure_of(handle)
        return RunEnd(handle.id, at.status, at.step, at.node, closed=True, reason=reason)
    if stop_at_pause and at.status == PAUSED:
        return RunEnd(handle.id, at.status, at.step, at.node, closed=False)
    if (stop_when_idle and at.status == "RUNNING" and not moved
            and await waits_for_outside(handle)):
        return RunEnd(handle.id, at.status, at.step, at.node, closed=False, idle=True)
    return None


async def _poll(handle: WorkflowHandle[Any, Any], workflows: Sequence[type], began: bool
                ) -> tuple[str, list[Transition], WorkflowExecutionDescription] | None:
    """The run's execution, status and log (in that order); None when no worker answered
    for a running run this time."""
    info = await describe(handle)
    if not began:  # no workflow task completed: nothing to ask, nothing moved
        return (status_of(info), [], info) if closed(info) else None
    if closed(info) and workflows:
        # Replayed here, not asked of a worker: a worker would replay the same history, and
        # asking waits out the query's timeout when none is left (~30 s after one stopped:
        # the server still lists it as polling).
        status, log = await _replayed(handle, info, workflows)
        return _closed_status(info, status), log, info
    try:
        status = await handle.query(names.STATUS.name, result_type=str)
        log = await handle.query(names.TRANSITIONS.name, result_type=list[Transition])
    except (RPCError, WorkflowQueryFailedError) as exc:
        if isinstance(exc, RPCError) and exc.status == RPCStatusCode.NOT_FOUND:
            raise RunNotFound(f"run {handle.id!r} not found") from None
        if not closed(info):
            return None
        status, log = await _replayed(handle, info, workflows)
    return _closed_status(info, status), log, info


def _closed_status(info: WorkflowExecutionDescription, status: str) -> str:
    # Closed without reaching a terminal node: the execution says how.
    return status_of(info) if closed(info) and status not in AGENT_ENDS else status


async def _replayed(handle: WorkflowHandle[Any, Any], info: WorkflowExecutionDescription,
                    workflows: Sequence[type]) -> tuple[str, list[Transition]]:
    """A closed run's log from its history replayed here with ``workflows``; without them
    (or when it does not replay), what its search attributes say."""
    said = search.run_status(info.status, info.typed_search_attributes) or "UNKNOWN"
    result = await replay_closed(handle, info, workflows)
    if result is None:
        return said, []
    if result.failure or not result.states:
        return said, result.log
    return result.states[-1].status.value, result.log


async def has_begun(handle: WorkflowHandle[Any, Any], scan: int = 50) -> bool:
    """Whether the run completed a workflow task (among its first few events)."""
    async for event in handle.fetch_history_events(page_size=scan):
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            return True
        if event.event_id >= scan:
            break
    return False


async def waits_for_outside(handle: WorkflowHandle[Any, Any]) -> bool:
    """True when nothing inside the run is pending: it waits for a signal or an update."""
    raw = (await handle.describe()).raw_description
    return (not raw.HasField("pending_workflow_task") and not raw.pending_activities
            and not raw.pending_children and not raw.pending_nexus_operations)

"""Why a run did not settle, in one line for the checker's report: what the server says the
run waits for (its pending workflow task and activities, with their attempts and last
failures), the last workflow task failure in its history, its open timers, the events it
ended on, and the workers' last log records that name it. CI shows only the output, and a
stuck run's evidence is gone once the trial's server is: the report must carry what the
next person needs (docs/reliability.md)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from google.protobuf.timestamp_pb2 import Timestamp
from temporalio.api.enums.v1 import (
    EventType,
    PendingActivityState,
    PendingWorkflowTaskState,
    WorkflowExecutionStatus,
    WorkflowTaskFailedCause,
)
from temporalio.api.failure.v1 import Failure
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflow.v1 import PendingActivityInfo, PendingWorkflowTaskInfo
from temporalio.client import Client, WorkflowHistory

RPC_TIMEOUT = timedelta(seconds=30)
FAILURE_CHARS = 300
LAST_EVENTS = 4
LOG_RECORDS = 3  # the workers' last log records that name the run
LOG_CHARS = 240
RECORD = re.compile(r"\n(?=\d{4}-\d{2}-\d{2} )")  # a worker's log record starts with its time


async def why_stuck(client: Client, workflow_id: str, logs: Sequence[Path] = ()) -> str:
    """What the server and the history say of the run's latest Temporal run, and what the
    worker ``logs`` last say of it (never raises: a run that cannot be described says so)."""
    said = worker_logs(logs, workflow_id)
    try:
        handle = client.get_workflow_handle(workflow_id)
        described = await handle.describe(rpc_timeout=RPC_TIMEOUT)
        history = await client.get_workflow_handle(
            workflow_id, run_id=described.run_id).fetch_history(rpc_timeout=RPC_TIMEOUT)
    except Exception as exc:  # the report is best effort: the violation stands without it
        return "; ".join([f"could not describe it: {type(exc).__name__}: {exc}", *said])
    raw = described.raw_description
    info = raw.workflow_execution_info
    now = datetime.now(UTC)
    status = WorkflowExecutionStatus.Name(info.status).removeprefix("WORKFLOW_EXECUTION_STATUS_")
    parts = [f"temporal {status} (run {described.run_id}, {info.history_length} events)"]
    if raw.HasField("pending_workflow_task"):
        parts.append(workflow_task(raw.pending_workflow_task, now))
    parts += [activity(a, now) for a in raw.pending_activities]
    parts += from_history(history, now)
    return "; ".join([*parts, *said])


async def nothing_pending(client: Client, workflow_id: str) -> bool:
    """Whether the run is RUNNING with nothing that could move it: no workflow task, activity
    or child pending and no timer open — stuck until something from outside arrives."""
    try:
        described = await client.get_workflow_handle(workflow_id).describe(
            rpc_timeout=RPC_TIMEOUT)
        raw = described.raw_description
        if (raw.workflow_execution_info.status
                != WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_RUNNING
                or raw.HasField("pending_workflow_task") or raw.pending_activities
                or raw.pending_children):
            return False
        history = await client.get_workflow_handle(
            workflow_id, run_id=described.run_id).fetch_history(rpc_timeout=RPC_TIMEOUT)
    except Exception:  # undescribable: not shown to be stuck (why_stuck says what failed)
        return False
    return not any(t.startswith("open timer") for t in from_history(history, datetime.now(UTC)))


def worker_logs(logs: Sequence[Path], workflow_id: str) -> list[str]:
    """The last records naming ``workflow_id`` in the workers' logs, each as its first line
    and, for a traceback, its last (the exception): a failed activation, an activity's
    failure, a nondeterminism error."""
    found: list[tuple[str, str]] = []
    for log in logs:
        text = log.read_text(errors="replace") if log.exists() else ""
        found += [(log.name, r) for r in RECORD.split(text) if workflow_id in r]
    found.sort(key=lambda f: f[1][:23])  # by the record's time
    out = []
    for name, record in found[-LOG_RECORDS:]:
        lines = record.strip().splitlines()
        text = lines[0] if len(lines) == 1 else f"{lines[0]} … {lines[-1]}"
        out.append(f"{name}: {text[:LOG_CHARS]}")
    return [f"worker logs: {' | '.join(out)}"] if out else []


def workflow_task(task: PendingWorkflowTaskInfo, now: datetime) -> str:
    state = PendingWorkflowTaskState.Name(task.state).removeprefix("PENDING_WORKFLOW_TASK_STATE_")
    since = task.original_scheduled_time or task.scheduled_time
    return (f"pending workflow task {state.lower()}, attempt {task.attempt}, "
            f"first scheduled {ago(since, now)}")


def activity(act: PendingActivityInfo, now: datetime) -> str:
    state = PendingActivityState.Name(act.state).removeprefix("PENDING_ACTIVITY_STATE_")
    most = act.maximum_attempts or "unlimited"
    text = (f"pending activity {act.activity_type.name} (id {act.activity_id}) "
            f"{state.lower()}, attempt {act.attempt} of {most}, "
            f"scheduled {ago(act.scheduled_time, now)}")
    if act.HasField("last_started_time"):
        text += f", last started {ago(act.last_started_time, now)}"
        if act.last_worker_identity:
            text += f" by {act.last_worker_identity}"
    if act.HasField("last_heartbeat_time"):
        text += f", last heartbeat {ago(act.last_heartbeat_time, now)}"
    if act.HasField("next_attempt_schedule_time"):
        text += f", next attempt {ago(act.next_attempt_schedule_time, now)}"
    if act.HasField("last_failure"):
        text += f", last failure: {failure(act.last_failure)}"
    return text


def from_history(history: WorkflowHistory, now: datetime) -> list[str]:
    """The last workflow task failure or timeout since the last completed task, the timers
    still open, the reset that started this run, and the events the run ended on."""
    events = list(history.events)
    out: list[str] = []
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            attrs = event.workflow_task_failed_event_attributes
            if attrs.new_run_id:  # the reset that made this run (the old run's last task)
                out.append(f"reset at event {event.event_id}: {attrs.identity or 'reset'}"
                           f" ({failure(attrs.failure) if attrs.HasField('failure') else ''})")
    failed = [e for e in events if e.event_type in TASK_TROUBLE
              and not e.workflow_task_failed_event_attributes.new_run_id]
    completed = [e.event_id for e in events
                 if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED]
    if failed and (not completed or failed[-1].event_id > completed[-1]):
        since = [e for e in failed if not completed or e.event_id > completed[-1]]
        out.append(f"workflow task failing since the last completed one ({len(since)} in the "
                   f"history; the pending task's attempt counts the rest), the last: "
                   f"{task_trouble(failed[-1])}")
    fired = {e.timer_fired_event_attributes.timer_id for e in events
             if e.event_type == EventType.EVENT_TYPE_TIMER_FIRED}
    fired |= {e.timer_canceled_event_attributes.timer_id for e in events
              if e.event_type == EventType.EVENT_TYPE_TIMER_CANCELED}
    for e in events:
        timer = e.timer_started_event_attributes
        if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED and timer.timer_id not in fired:
            due = e.event_time.ToDatetime(UTC) + timer.start_to_fire_timeout.ToTimedelta()
            out.append(f"open timer {timer.timer_id} (event {e.event_id}) due "
                       f"{fmt(due - now)}")
    out.append("last events: " + ", ".join(brief(e, now) for e in events[-LAST_EVENTS:]))
    return out


TASK_TROUBLE = (EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
                EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT)


def task_trouble(event: HistoryEvent) -> str:
    if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
        return f"event {event.event_id}, timed out"
    attrs = event.workflow_task_failed_event_attributes
    cause = WorkflowTaskFailedCause.Name(attrs.cause).removeprefix("WORKFLOW_TASK_FAILED_CAUSE_")
    return f"event {event.event_id}, {cause.lower()}: {failure(attrs.failure)}"


def brief(event: HistoryEvent, now: datetime) -> str:
    name = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")
    return f"{event.event_id} {name} {ago(event.event_time, now)}"


def failure(f: Failure) -> str:
    text = f.message
    if f.HasField("application_failure_info") and f.application_failure_info.type:
        text = f"{f.application_failure_info.type}: {text}"
    if f.HasField("cause"):
        text += f" (cause: {failure(f.cause)})"
    return text[:FAILURE_CHARS] + ("…" if len(text) > FAILURE_CHARS else "")


def ago(stamp: Timestamp, now: datetime) -> str:
    if not stamp.seconds and not stamp.nanos:
        return "never"
    return fmt(stamp.ToDatetime(UTC) - now)


def fmt(delta: timedelta) -> str:
    seconds = delta.total_seconds()
    return f"{-seconds:.0f} s ago" if seconds <= 0 else f"in {seconds:.0f} s"

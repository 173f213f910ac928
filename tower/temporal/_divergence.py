"""What a replay found, in the agent's terms: the moves the original run published, where
the replayed log leaves them, and the SDK's nondeterminism error read as "the code now does X
where the history has Y" (the node, the step, the command), never Tower's internals."""

from __future__ import annotations

import re
from collections.abc import Sequence

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory
from temporalio.converter import decode_typed_search_attributes

from tower.contract import search
from tower.core.engine import Transition


def recorded_moves(history: WorkflowHistory) -> list[tuple[int, str]]:
    """(step, node) each time the original run published where it stood (accumulated
    event by event, as the server does: an upsert carries only what changed)."""
    moves: list[tuple[int, str]] = []
    step: int | None = None
    node: str | None = None
    for event in history.events:
        if event.event_type != EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            continue
        attrs = decode_typed_search_attributes(
            event.upsert_workflow_search_attributes_event_attributes.search_attributes)
        new_step, new_node = attrs.get(search.AGENT_STEP), attrs.get(search.AGENT_NODE)
        step = step if new_step is None else new_step
        node = node if new_node is None else new_node
        if (new_step is not None or new_node is not None) and step is not None and node:
            moves.append((step, node))
    return moves


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
_CORE_MESSAGE = re.compile(r'message: "((?:[^"\\]|\\.)*)"')
# The SDK core's words for a command the code gave where the history has another event.
_PREFIX = re.compile(r"^\[TMPRL\d+\]\s*Nondeterminism error:\s*", re.IGNORECASE)
_MACHINE = re.compile(r"^([\w ]+?) ?machine does not handle this event", re.IGNORECASE)
_NOTHING = re.compile(r"No command scheduled for event", re.IGNORECASE)
_OTHER_TYPE = re.compile(r"(Activity|Local activity|Child workflow) (?:type|id) of scheduled "
                         r"event '([^']*)' does not match .* command '([^']*)'", re.IGNORECASE)
_COMMANDS = {
    "activity": "schedules an activity", "timer": "starts a timer",
    "child workflow": "starts a child workflow", "update": "answers a decision (update)",
    "upsertworkflowsearchattributes": "publishes a move (search attributes)",
    "modifyworkflowproperties": "updates the run's details (memo)",
    "complete workflow": "completes the run", "fail workflow": "fails the run",
    "continue as new workflow": "continues as new", "cancel workflow": "cancels the run",
    "signal external wf": "signals another workflow",
    "cancel external wf": "cancels another workflow", "nexus operation": "calls a Nexus operation",
}
_TOWER_ACTIVITIES = {"tower_run_id": "a gate opening its request",
                     "tower_attest": "a gate attesting its request",
                     "tower_continued_from": "the run checking where it continued from",
                     "tower_cleanup_stores": "the run's clean-up"}


def describe_failure(
    history: WorkflowHistory, exc: BaseException, log: Sequence[Transition] = (),
) -> str:
    """Where the replay left the recorded run, in the agent's terms (``diverged at step 3
    (node reason): the code now starts a timer where the history has activity call_model,
    event 12``); a failure that is no divergence is named with its exception."""
    text = str(exc).strip() or type(exc).__name__
    inner = _CORE_MESSAGE.search(text)  # the SDK core wraps its message in a debug dump
    said = inner.group(1) if inner else text
    found = _EVENT_ID.search(text)
    event_id = int(found.group(1) or found.group(2)) if found else None
    event = next((e for e in history.events if e.event_id == event_id), None)
    last = log[-1] if log else None
    where = (f"at step {last.step} (node {last.target})" if last
             else "before its first step")
    other = _OTHER_TYPE.search(said)
    if other:
        kind, recorded, now = other.groups()
        return (f"diverged {where}: the code now calls {kind.lower()} {now} where the history "
                f"has {kind.lower()} {recorded}")
    machine = _MACHINE.search(_PREFIX.sub("", said))
    if event is not None and (machine or _NOTHING.search(said)):
        command = ("does nothing" if machine is None else
                   _COMMANDS.get(machine.group(1).strip().lower().removesuffix(" machine"),
                                 f"gives a {machine.group(1).strip()} command"))
        return (f"diverged {where}: the code now {command} where the history has "
                f"{_what(history, event)}, event {event.event_id}")
    cause = f"{type(exc).__name__}: {said}"
    if exc.__cause__ is not None and str(exc.__cause__) not in text:
        cause += f" (caused by {type(exc.__cause__).__name__}: {exc.__cause__})"
    if event is None:
        return f"failed {where}: {cause}"
    kind = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")
    return f"failed {where}, at event {event.event_id} ({kind}): {cause}"


def _what(history: WorkflowHistory, event: HistoryEvent) -> str:
    """A history event as what the original run did."""
    kind = event.event_type
    if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
        name = event.activity_task_scheduled_event_attributes.activity_type.name
        return _TOWER_ACTIVITIES.get(name, f"activity {name}")
    if kind == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
        moves = recorded_moves(WorkflowHistory(history.workflow_id, [
            e for e in history.events if e.event_id <= event.event_id]))
        if moves:
            step, node = moves[-1]
            return f"the move to node {node} (step {step})"
        return "a search attribute update"
    if kind == EventType.EVENT_TYPE_MARKER_RECORDED:
        return f"marker {event.marker_recorded_event_attributes.marker_name}"
    if kind == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
        child = event.start_child_workflow_execution_initiated_event_attributes
        return f"child workflow {child.workflow_type.name}"
    words = {EventType.EVENT_TYPE_TIMER_STARTED: "a timer",
             EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED: "an update of the run's details",
             EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED: "the run's completion",
             EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED: "the run's failure",
             EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW: "a continue-as-new"}
    return words.get(kind, EventType.Name(kind).removeprefix("EVENT_TYPE_").lower()
                     .replace("_", " "))

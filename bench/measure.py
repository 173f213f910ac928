"""Read figures out of event histories: events, bytes, per-turn segments, run chains."""

from __future__ import annotations

from dataclasses import dataclass

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory

ACCEPTED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
SCHEDULED = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
CONTINUED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
MARKER = EventType.EVENT_TYPE_MARKER_RECORDED
LOCAL_ACTIVITY = "core_local_activity"  # the SDK's marker for a local activity's result


def history_bytes(history: WorkflowHistory) -> int:
    """The events' serialized size: what the server stores for this run."""
    return sum(e.ByteSize() for e in history.events)


async def run_chain(client: Client, workflow_id: str, first_run: str) -> list[WorkflowHistory]:
    """Every run of a workflow id, following continue-as-new from the first run."""
    chain, run_id = [], first_run
    while run_id:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        chain.append(history)
        last = history.events[-1]
        run_id = (last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
                  if last.event_type == CONTINUED else "")
    return chain


@dataclass
class TurnCost:
    bytes: int = 0
    events: int = 0
    model_calls: int = 0


def turn_costs(chain: list[WorkflowHistory], update_name: str = "send") -> list[TurnCost]:
    """Cost of each user turn: the events from its update's acceptance to the next one's."""
    turns: list[TurnCost] = []
    for history in chain:
        current: TurnCost | None = None
        for e in history.events:
            if (e.event_type == ACCEPTED and e.workflow_execution_update_accepted_event_attributes
                    .accepted_request.input.name == update_name):
                current = TurnCost()
                turns.append(current)
            if current is None:
                continue
            current.bytes += e.ByteSize()
            current.events += 1
            if is_model_call(e):
                current.model_calls += 1
    return turns


def is_model_call(e: HistoryEvent) -> bool:
    """A model call: an activity scheduled, or a local activity's result recorded."""
    if e.event_type == SCHEDULED:
        return e.activity_task_scheduled_event_attributes.activity_type.name == "call_model"
    if e.event_type == MARKER:
        marker = e.marker_recorded_event_attributes
        data = marker.details["data"].payloads
        return marker.marker_name == LOCAL_ACTIVITY and bool(data) and (
            b'"call_model"' in data[0].data)
    return False

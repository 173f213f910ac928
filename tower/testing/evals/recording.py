"""What a recorded run holds for an eval, read from its history alone: its input, every
model call (request and reply), every tool call with its answer, and every message from
outside with the step the run stood at. A continue-as-new chain is one ``Recording``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from joserfc import jws
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.converter import decode_typed_search_attributes

from tower.contract import search
from tower.contract.failures import Code, TowerError

E = EventType


class RecordingError(TowerError):
    """A history the eval cannot read (an encoding it cannot decode, no start event)."""

    CODE = Code.BAD_EVAL


@dataclass(frozen=True)
class ModelCall:
    node: str
    request: dict[str, Any]
    reply: dict[str, Any]


@dataclass
class ToolAnswer:
    tool: str
    arguments: dict[str, Any]
    result: Any = None


@dataclass(frozen=True)
class Outside:
    """A message from outside the run: a ``decide`` update carries a signed decision."""

    kind: str  # "update" | "signal"
    name: str
    args: list[Any]
    step: int  # the step the run had published when it arrived

    @property
    def decision(self) -> dict[str, Any] | None:
        """The claims of a decision (verdict, approver, role, edits, note), else None."""
        if not (self.name in ("decide", "decision") and self.args
                and isinstance(self.args[0], dict)):
            return None
        wire = self.args[0]
        if wire.get("unsigned"):
            return dict(wire["unsigned"])
        token = wire.get("token")
        if not isinstance(token, str) or token.count(".") != 2:
            return None
        claims: dict[str, Any] = json.loads(jws.extract_compact(token.encode()).payload)
        return claims


@dataclass
class Recording:
    source: str
    workflow_id: str
    workflow_type: str
    task_queue: str
    input: list[Any]
    histories: list[WorkflowHistory]
    model_calls: list[ModelCall] = field(default_factory=list)
    outside: list[Outside] = field(default_factory=list)
    # Decisions the run took (by decision id): a refused one is never re-signed, or the
    # eval would turn a forged or mistaken decision into a genuine one.
    accepted: set[str] = field(default_factory=set)
    tool_calls: list[ToolAnswer] = field(default_factory=list)
    # The first tool call of a gate's re-check that found the world changed while the run
    # waited (its decision's outcome: stale), if any: the eval cannot make that change.
    world_changed_at: int | None = None

    def replayable(self, message: Outside) -> bool:
        claims = message.decision
        return claims is None or claims.get("jti") in self.accepted


def value(payload: Payload) -> Any:
    """A payload's value as JSON (plain JSON payloads only: decode a codec's history first)."""
    encoding = payload.metadata.get("encoding", b"").decode()
    if encoding == "binary/null":
        return None
    if encoding != "json/plain":
        raise RecordingError(f"a payload encoded as {encoding or 'unknown'!r}: export the "
                             "history decoded (json/plain) to evaluate it")
    return json.loads(payload.data)


def decision_taken(event: Any, *results: str) -> str | None:
    """The decision id an update-completed event says the run took with one of
    ``results`` (default approved or rejected; not a duplicate), else None."""
    outcome = event.workflow_execution_update_completed_event_attributes.outcome
    told = values(outcome.success.payloads) if outcome.HasField("success") else []
    if told and isinstance(told[0], dict) and told[0].get("result") in (
            results or ("approved", "rejected")) and not told[0].get("duplicate"):
        return str(told[0].get("decision_id"))
    return None


def values(payloads: Iterable[Payload]) -> list[Any]:
    return [value(p) for p in payloads]


def chains(loaded: Sequence[tuple[str, WorkflowHistory]]) -> list[Recording]:
    """One Recording per run: the histories of one workflow id that continue each other are
    joined, first run first."""
    by_previous: dict[str, tuple[str, WorkflowHistory]] = {}  # keyed by the run continued
    firsts: list[tuple[str, WorkflowHistory]] = []
    for source, history in loaded:
        started = _started(history)
        if started.continued_execution_run_id:
            by_previous[started.continued_execution_run_id] = (source, history)
        else:
            firsts.append((source, history))
    out = []
    for source, history in firsts:
        chain, run_id = [history], _started(history).first_execution_run_id
        while run_id in by_previous:
            chain.append(by_previous.pop(run_id)[1])
            run_id = _continued_as(chain[-2]) or ""
        out.append(record(source, chain))
    out += [record(source, [history]) for source, history in by_previous.values()]
    return out


def _started(history: WorkflowHistory) -> Any:
    first = history.events[0] if history.events else None
    if first is None or first.event_type != E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
        raise RecordingError(f"{history.workflow_id}: no WorkflowExecutionStarted event")
    return first.workflow_execution_started_event_attributes


def _continued_as(history: WorkflowHistory) -> str | None:
    last = history.events[-1]
    if last.event_type != E.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
        return None
    run_id: str = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    return run_id or None


def record(source: str, chain: list[WorkflowHistory]) -> Recording:
    started = _started(chain[0])
    rec = Recording(source=source, workflow_id=chain[0].workflow_id,
                    workflow_type=started.workflow_type.name,
                    task_queue=started.task_queue.name, input=values(started.input.payloads),
                    histories=chain)
    for history in chain:
        _read(history, rec)
    return rec


def _read(history: WorkflowHistory, rec: Recording) -> None:
    scheduled: dict[int, dict[str, Any]] = {}
    tools: dict[int, ToolAnswer] = {}  # scheduled event id -> its call, answered when done
    arrived: dict[str, int] = {}  # update id -> tool calls made before its decision came
    step = 0
    for event in history.events:
        kind = event.event_type
        if kind == E.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            attrs = decode_typed_search_attributes(
                event.upsert_workflow_search_attributes_event_attributes.search_attributes)
            step = attrs.get(search.AGENT_STEP) or step
        elif kind == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            asked = event.activity_task_scheduled_event_attributes
            called = values(asked.input.payloads)
            if asked.activity_type.name == "call_model":
                scheduled[event.event_id] = called[0]
            elif called and isinstance(called[0], dict) and "tool" in called[0]:
                tools[event.event_id] = ToolAnswer(str(called[0]["tool"]),
                                                   called[0].get("arguments") or {})
                rec.tool_calls.append(tools[event.event_id])
        elif kind == E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            done = event.activity_task_completed_event_attributes
            if done.scheduled_event_id in tools:
                tools.pop(done.scheduled_event_id).result = values(done.result.payloads)[0]
            request = scheduled.pop(done.scheduled_event_id, None)
            if request is not None:
                reply = values(done.result.payloads)[0]
                rec.model_calls.append(ModelCall(str(request.get("node", "")), request, reply))
        elif kind == E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            s = event.workflow_execution_signaled_event_attributes
            rec.outside.append(Outside("signal", s.signal_name, values(s.input.payloads), step))
        elif kind == E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            accepted = event.workflow_execution_update_accepted_event_attributes.accepted_request
            u = accepted.input
            rec.outside.append(Outside("update", u.name, values(u.args.payloads), step))
            arrived[accepted.meta.update_id] = len(rec.tool_calls)
        elif kind == E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
            if (taken := decision_taken(event)) is not None:
                rec.accepted.add(taken)
            completed = event.workflow_execution_update_completed_event_attributes
            if (rec.world_changed_at is None and decision_taken(event, "stale")
                    and completed.meta.update_id in arrived):
                rec.world_changed_at = arrived[completed.meta.update_id]
        elif kind == E.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            result = values(event.workflow_execution_completed_event_attributes.result.payloads)
            state = result[0] if result and isinstance(result[0], dict) else {}
            for gate in state.get("approvals") or []:
                decided = (gate or {}).get("decision") or {}
                if decided.get("decision_id"):
                    rec.accepted.add(str(decided["decision_id"]))

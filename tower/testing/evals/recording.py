"""What a run holds for an eval, read from its history alone in one walk: its input, every
model call (request and reply), every tool call with its answer, every message from outside
with the step the run stood at, and the figures an eval compares (``RunSummary``). A
continue-as-new chain is one ``Recording``; a candidate's new run is read the same way.

The summary's ``trail`` is the path of states as the history shows it (the nodes the run
published or worked in, repeats folded), so a recording made by code that no longer exists
reads as the candidate's new run does.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from joserfc import jws
from pydantic import BaseModel, Field
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.converter import decode_typed_search_attributes

from tower.contract import search
from tower.contract.failures import Code, TowerError

E = EventType
GATE_MARK = "notify approvers · gate "


class ToolCall(BaseModel):
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)

    def __str__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in sorted(self.arguments.items()))
        return f"{self.name}({args})"


class RunSummary(BaseModel):
    """One run as an eval sees it."""

    workflow_id: str
    agent: str
    status: str  # DONE | FAILED | AWAITING_APPROVAL | RUNNING | TERMINATED ...
    node: str
    trail: list[str] = Field(default_factory=list)
    tool_calls: list[ToolCall] = Field(default_factory=list)
    model_calls: int = 0
    models: list[str] = Field(default_factory=list)
    gates: list[str] = Field(default_factory=list)  # gates opened, in order
    decisions: int = 0  # decisions the run took (refused ones are not counted)
    tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0
    answer: str = ""
    error: str = ""
    made: dict[str, str] = Field(default_factory=dict)  # an id its tools made -> <tool.field>

    @property
    def moves(self) -> list[tuple[str, str]]:
        """The trail's transitions, START first."""
        path = ["START", *self.trail]
        return list(zip(path, path[1:], strict=False))

    def follow(self, node: str) -> None:
        """The run worked in (or published) ``node``: the trail's next state, unless repeated."""
        if node and (not self.trail or self.trail[-1] != node):
            self.trail.append(node)

    def failed_in(self, node: str) -> None:
        """The node a run failed in (AgentFailed's details), before the FAILED it published."""
        end = len(self.trail) - 1 if self.trail and self.trail[-1] == "FAILED" else len(self.trail)
        if end == 0 or self.trail[end - 1] != node:
            self.trail.insert(end, node)


def produced(tool: str, result: Any, out: dict[str, str], path: str = "") -> None:
    """Remember the ids a tool made up by where they came from, so a later call passing one
    on reads the same in every run."""
    if isinstance(result, dict):
        for key, item in result.items():
            produced(tool, item, out, f"{path}.{key}" if path else key)
    elif isinstance(result, str) and len(result) >= 6 and path.endswith(("id", "fingerprint")):
        out.setdefault(result, f"<{tool}.{path}>")


def derived(arguments: Any, made: dict[str, str]) -> Any:
    """``arguments`` with each id a tool made up named by where it came from (``produced``)."""
    if isinstance(arguments, dict):
        return {k: derived(v, made) for k, v in arguments.items()}
    if isinstance(arguments, list):
        return [derived(v, made) for v in arguments]
    return made.get(arguments, arguments) if isinstance(arguments, str) else arguments


def answer(state: dict[str, Any]) -> str:
    """What the run answered: its ``reply`` field, else its last assistant message."""
    if isinstance(state.get("reply"), str) and state["reply"]:
        return str(state["reply"])
    said = [m.get("content", "") for m in state.get("messages", [])
            if isinstance(m, dict) and m.get("role") == "assistant"]
    return str(said[-1]) if said else ""


class EvalError(TowerError):
    """An eval that cannot be made: a history it cannot read (an encoding it cannot decode,
    no start event), a --baseline folder that holds no eval report, no `temporal` binary
    for its own dev server."""

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
        return json.loads(jws.extract_compact(token.encode()).payload)


@dataclass
class Recording:
    source: str
    workflow_id: str
    workflow_type: str
    task_queue: str
    input: list[Any]
    histories: list[WorkflowHistory]
    summary: RunSummary  # the figures an eval compares
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
        raise EvalError(f"a payload encoded as {encoding or 'unknown'!r}: export the "
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
            run_id = continued_as(chain[-2]) or ""
        out.append(record(source, chain))
    out += [record(source, [history]) for source, history in by_previous.values()]
    return out


def _started(history: WorkflowHistory) -> Any:
    first = history.events[0] if history.events else None
    if first is None or first.event_type != E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
        raise EvalError(f"{history.workflow_id}: no WorkflowExecutionStarted event")
    return first.workflow_execution_started_event_attributes


def continued_as(history: WorkflowHistory) -> str | None:
    last = history.events[-1]
    if last.event_type != E.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
        return None
    run_id: str = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    return run_id or None


def record(source: str, chain: list[WorkflowHistory]) -> Recording:
    started = _started(chain[0])
    summary = RunSummary(workflow_id=chain[0].workflow_id, agent=started.workflow_type.name,
                         status="RUNNING", node="")
    rec = Recording(source=source, workflow_id=chain[0].workflow_id,
                    workflow_type=started.workflow_type.name,
                    task_queue=started.task_queue.name, input=values(started.input.payloads),
                    histories=chain, summary=summary)
    seen = _Seen()
    # A run started with its first move's attributes upserts nothing at that move: the
    # start names its entry node (START -> entry and its next move may share one task).
    _publish(decode_typed_search_attributes(started.search_attributes), summary, seen)
    for history in chain:
        seen.step, seen.model_requests = 0, {}
        for event in history.events:
            _read(event, rec, summary, seen)
    summary.decisions = len(rec.accepted)
    summary.made = seen.produced
    start = chain[0].events[0].event_time.ToDatetime()
    end = chain[-1].events[-1].event_time.ToDatetime()
    summary.latency_s = round((end - start).total_seconds(), 3)
    if summary.status == "RUNNING":
        summary.status = str(seen.published.get(search.AGENT_STATUS.name) or "RUNNING")
    summary.node = summary.node or str(seen.published.get(search.AGENT_NODE.name)
                                       or (summary.trail or [""])[-1])
    summary.follow(summary.node)
    return rec


class _Seen:
    """What a history said earlier that later events are read with."""

    def __init__(self) -> None:
        self.step = 0  # the step the run last published
        self.published: dict[str, Any] = {}  # the search attributes, as they stand
        self.model_requests: dict[int, dict[str, Any]] = {}  # scheduled event id -> request
        self.produced: dict[str, str] = {}  # a value a tool returned -> "<tool.field>"
        self.answers: dict[int, ToolAnswer] = {}  # scheduled event id -> call, answered when done
        self.arrived: dict[str, int] = {}  # update id -> tool calls made before it came


def _read(event: Any, rec: Recording, s: RunSummary, seen: _Seen) -> None:
    kind = event.event_type
    if kind == E.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
        attrs = decode_typed_search_attributes(
            event.upsert_workflow_search_attributes_event_attributes.search_attributes)
        seen.step = attrs.get(search.AGENT_STEP) or seen.step
        _publish(attrs, s, seen)
    elif kind == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
        asked = event.activity_task_scheduled_event_attributes
        args = values(asked.input.payloads)
        if asked.activity_type.name == "call_model":
            seen.model_requests[event.event_id] = args[0]
        summary = _summary(event)
        if " · " in summary and not summary.startswith(("attest", "notify")):
            s.follow(summary.split(" · ")[0])
        if summary.startswith(GATE_MARK):
            s.gates.append(summary[len(GATE_MARK):])
        if args and isinstance(args[0], dict) and "tool" in args[0]:
            call = ToolAnswer(str(args[0]["tool"]), args[0].get("arguments") or {})
            seen.answers[event.event_id] = call
            rec.tool_calls.append(call)
            s.tool_calls.append(ToolCall(name=call.tool,
                                         arguments=derived(call.arguments, seen.produced)))
    elif kind == E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
        done = event.activity_task_completed_event_attributes
        result = values(done.result.payloads)
        reply = result[0] if result else None
        request = seen.model_requests.pop(done.scheduled_event_id, None)
        if request is not None:
            rec.model_calls.append(ModelCall(str(request.get("node", "")), request, result[0]))
        if done.scheduled_event_id in seen.answers:
            call = seen.answers.pop(done.scheduled_event_id)
            call.result = reply
            produced(call.tool, reply, seen.produced)
        if isinstance(reply, dict) and "model" in reply and "usage" in reply:
            usage = reply.get("usage") or {}
            s.model_calls += 1
            if reply["model"] not in s.models:
                s.models.append(reply["model"])
            s.tokens += int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))
            s.cost_usd = round(s.cost_usd + float(usage.get("cost_usd", 0.0)), 8)
    elif kind == E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
        signal = event.workflow_execution_signaled_event_attributes
        rec.outside.append(Outside("signal", signal.signal_name,
                                   values(signal.input.payloads), seen.step))
    elif kind == E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
        accepted = event.workflow_execution_update_accepted_event_attributes.accepted_request
        u = accepted.input
        rec.outside.append(Outside("update", u.name, values(u.args.payloads), seen.step))
        seen.arrived[accepted.meta.update_id] = len(rec.tool_calls)
    elif kind == E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
        if (taken := decision_taken(event)) is not None:
            rec.accepted.add(taken)
        update_id = event.workflow_execution_update_completed_event_attributes.meta.update_id
        # A re-check found the world changed while the run waited: tools are answered from
        # the recording from here on (models.py).
        if (rec.world_changed_at is None and decision_taken(event, "stale")
                and update_id in seen.arrived):
            rec.world_changed_at = seen.arrived[update_id]
    elif kind == E.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
        result = values(event.workflow_execution_completed_event_attributes.result.payloads)
        state = result[0] if result else None
        if not isinstance(state, dict):
            s.status = "DONE"
            return
        s.status, s.node = str(state.get("status", "DONE")), str(state.get("node", ""))
        s.answer = answer(state)
        if s.status == "FAILED":
            s.error = (state.get("errors") or [""])[-1]
        for gate in state.get("approvals") or []:
            decided = (gate or {}).get("decision") or {}
            if decided.get("decision_id"):
                rec.accepted.add(str(decided["decision_id"]))
    elif kind == E.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
        failure = event.workflow_execution_failed_event_attributes.failure
        details = values(failure.application_failure_info.details.payloads)
        if details and isinstance(details[0], dict) and details[0].get("node"):
            s.failed_in(str(details[0]["node"]))
        s.status, s.node, s.error = "FAILED", "FAILED", failure.message
    elif kind in (E.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
                  E.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
                  E.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED):
        s.status = kind.name.removeprefix("EVENT_TYPE_WORKFLOW_EXECUTION_")


def _publish(attrs: Any, s: RunSummary, seen: _Seen) -> None:
    for key in (search.AGENT_NODE, search.AGENT_STATUS, search.AGENT_ERROR):
        if attrs.get(key) is not None:
            seen.published[key.name] = attrs.get(key)
    if attrs.get(search.AGENT_NODE):
        s.follow(str(attrs.get(search.AGENT_NODE)))


def _summary(event: Any) -> str:
    if not event.HasField("user_metadata") or not event.user_metadata.HasField("summary"):
        return ""
    text = value(event.user_metadata.summary)
    return text if isinstance(text, str) else ""

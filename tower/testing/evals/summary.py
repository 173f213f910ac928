"""The figures an eval compares, read alike from any run's history (or chain).

``trail`` is the path of states as the history shows it (the nodes the run published or
worked in, repeats folded), so a recording made by code that no longer exists reads as
the candidate's new run does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.converter import decode_typed_search_attributes

from tower.contract import search
from tower.testing.evals.recording import decision_taken, value, values

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


def summarize(chain: Sequence[WorkflowHistory]) -> RunSummary:
    first = chain[0].events[0].workflow_execution_started_event_attributes
    s = RunSummary(workflow_id=chain[0].workflow_id, agent=first.workflow_type.name,
                   status="RUNNING", node="")
    published: dict[str, Any] = {}
    # A run started with its first move's attributes upserts nothing at that move: the
    # start names its entry node (START -> entry and its next move may share one task).
    _publish(decode_typed_search_attributes(first.search_attributes), s, published)
    seen = _Seen()
    for history in chain:
        for event in history.events:
            _read(event, s, published, seen)
    s.decisions = len(seen.decided)
    s.made = seen.produced
    start = chain[0].events[0].event_time.ToDatetime()
    end = chain[-1].events[-1].event_time.ToDatetime()
    s.latency_s = round((end - start).total_seconds(), 3)
    if s.status == "RUNNING":
        s.status = str(published.get(search.AGENT_STATUS.name) or "RUNNING")
    s.node = s.node or str(published.get(search.AGENT_NODE.name) or (s.trail or [""])[-1])
    _follow(s, s.node)
    return s


def _follow(s: RunSummary, node: str) -> None:
    if node and (not s.trail or s.trail[-1] != node):
        s.trail.append(node)


class _Seen:
    """What a history said earlier that later events are read with."""

    def __init__(self) -> None:
        self.tools: dict[int, str] = {}  # scheduled event id -> tool name
        self.produced: dict[str, str] = {}  # a value a tool returned -> "<tool.field>"
        self.decided: set[str] = set()


def _produced(tool: str, result: Any, out: dict[str, str], path: str = "") -> None:
    """Remember the ids a tool made up by where they came from, so a later call passing one
    on reads the same in every run."""
    if isinstance(result, dict):
        for key, item in result.items():
            _produced(tool, item, out, f"{path}.{key}" if path else key)
    elif isinstance(result, str) and len(result) >= 6 and path.endswith(("id", "fingerprint")):
        out.setdefault(result, f"<{tool}.{path}>")


def _derived(arguments: Any, produced: dict[str, str]) -> Any:
    if isinstance(arguments, dict):
        return {k: _derived(v, produced) for k, v in arguments.items()}
    if isinstance(arguments, list):
        return [_derived(v, produced) for v in arguments]
    return produced.get(arguments, arguments) if isinstance(arguments, str) else arguments


def _failed_in(s: RunSummary, node: str) -> None:
    """The node a run failed in (AgentFailed's details), before the FAILED it published."""
    end = len(s.trail) - 1 if s.trail and s.trail[-1] == "FAILED" else len(s.trail)
    if end == 0 or s.trail[end - 1] != node:
        s.trail.insert(end, node)


def _read(event: Any, s: RunSummary, published: dict[str, Any], seen: _Seen) -> None:
    kind = event.event_type
    if kind == E.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
        _publish(decode_typed_search_attributes(
            event.upsert_workflow_search_attributes_event_attributes.search_attributes),
            s, published)
    elif kind == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
        a = event.activity_task_scheduled_event_attributes
        summary = _summary(event)
        if " · " in summary and not summary.startswith(("attest", "notify")):
            _follow(s, summary.split(" · ")[0])
        if summary.startswith(GATE_MARK):
            s.gates.append(summary[len(GATE_MARK):])
        args = values(a.input.payloads)
        if args and isinstance(args[0], dict) and "tool" in args[0] and "arguments" in args[0]:
            seen.tools[event.event_id] = str(args[0]["tool"])
            s.tool_calls.append(ToolCall(name=args[0]["tool"],
                                         arguments=_derived(args[0]["arguments"], seen.produced)))
    elif kind == E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
        done = event.activity_task_completed_event_attributes
        result = values(done.result.payloads)
        reply = result[0] if result else None
        if done.scheduled_event_id in seen.tools:
            _produced(seen.tools[done.scheduled_event_id], reply, seen.produced)
        if isinstance(reply, dict) and "model" in reply and "usage" in reply:
            usage = reply.get("usage") or {}
            s.model_calls += 1
            if reply["model"] not in s.models:
                s.models.append(reply["model"])
            s.tokens += int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))
            s.cost_usd = round(s.cost_usd + float(usage.get("cost_usd", 0.0)), 8)
    elif kind == E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
        if (taken := decision_taken(event)) is not None:
            seen.decided.add(taken)
    elif kind == E.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
        result = event.workflow_execution_completed_event_attributes.result.payloads
        state = value(result[0]) if result else None
        if isinstance(state, dict):
            s.status, s.node = str(state.get("status", "DONE")), str(state.get("node", ""))
            s.answer = _answer(state)
            seen.decided |= {str(g["decision"]["decision_id"]) for g in state.get("approvals") or []
                             if isinstance(g, dict) and g.get("decision")}
            if s.status == "FAILED":
                s.error = (state.get("errors") or [""])[-1]
        else:
            s.status = "DONE"
    elif kind == E.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
        failure = event.workflow_execution_failed_event_attributes.failure
        details = values(failure.application_failure_info.details.payloads)
        if details and isinstance(details[0], dict) and details[0].get("node"):
            _failed_in(s, str(details[0]["node"]))
        s.status, s.node, s.error = "FAILED", "FAILED", failure.message
    elif kind in (E.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
                  E.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
                  E.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED):
        s.status = kind.name.removeprefix("EVENT_TYPE_WORKFLOW_EXECUTION_")


def _publish(attrs: Any, s: RunSummary, published: dict[str, Any]) -> None:
    for key in (search.AGENT_NODE, search.AGENT_STATUS, search.AGENT_ERROR):
        if attrs.get(key) is not None:
            published[key.name] = attrs.get(key)
    if attrs.get(search.AGENT_NODE):
        _follow(s, str(attrs.get(search.AGENT_NODE)))


def _summary(event: Any) -> str:
    if not event.HasField("user_metadata") or not event.user_metadata.HasField("summary"):
        return ""
    text = value(event.user_metadata.summary)
    return text if isinstance(text, str) else ""


def _answer(state: dict[str, Any]) -> str:
    """What the run answered: its ``reply`` field, else its last assistant message."""
    if isinstance(state.get("reply"), str) and state["reply"]:
        return str(state["reply"])
    said = [m.get("content", "") for m in state.get("messages", [])
            if isinstance(m, dict) and m.get("role") == "assistant"]
    return str(said[-1]) if said else ""

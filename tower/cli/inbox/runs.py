"""What the decision page shows beside the request: the conversation, what became of an
earlier request, how a finished run ended. Read with short timeouts: a missing worker
makes the page say so, never hang."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from tower.contract import names

QUERY_SECONDS = 3.0
MAX_MESSAGES = 30
MAX_CHARS = 2000


@dataclass(frozen=True)
class RunStory:
    messages: list[dict[str, str]] = field(default_factory=list)
    last_request: str = ""  # what became of the last approval request
    last_status: str = ""  # its status (GateStatus's value): what the pages read
    outcome: str = ""  # how a finished run ended (its last reply)
    answered: bool = True  # False: no worker answered within QUERY_SECONDS
    # The run itself says its deployment accepts UNSIGNED decisions. Never read from the
    # TowerUnsignedDecisions search attribute: whoever starts a run can set that one.
    unsigned: bool = False
    # The roles of the gates the run recorded (open or closed): who may see it (scope.py).
    gate_roles: frozenset[str] = frozenset()


async def run_story(client: Client, run: str, status: WorkflowExecutionStatus | None) -> RunStory:
    handle = client.get_workflow_handle(run, result_type=dict)
    try:
        if status == WorkflowExecutionStatus.COMPLETED:
            state = await asyncio.wait_for(handle.result(), QUERY_SECONDS)
        elif status in (WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.FAILED):
            # A FAILED run is a failed execution: a worker answers its state query.
            state = await asyncio.wait_for(handle.query(names.STATE.name, result_type=dict),
                                           QUERY_SECONDS)
        else:
            return RunStory()
    except (TimeoutError, RPCError):
        return RunStory(answered=False)
    return story_of(state)


def story_of(state: dict[str, Any]) -> RunStory:
    messages = [{"role": str(m.get("role", "")), "name": str(m.get("name") or ""),
                 "content": _short(str(m.get("content", "")))}
                for m in state.get("messages", []) if isinstance(m, dict)][-MAX_MESSAGES:]
    replies = [m["content"] for m in messages if m["role"] == "assistant"]
    records = state.get("approvals") or []
    last = records[-1] if records and isinstance(records[-1], dict) else {}
    return RunStory(messages=messages, last_request=last_request(records),
                    last_status=str(last.get("status") or ""),
                    outcome=f"{state.get('status', '')}: {replies[-1] if replies else ''}"
                    .rstrip(": "), unsigned=state.get("unsigned_decisions") is True,
                    gate_roles=frozenset(str(r.get("role")) for r in state.get("approvals", [])
                                         if isinstance(r, dict) and r.get("role")))


def last_request(records: list[dict[str, Any]]) -> str:
    if not records:
        return ""
    r = records[-1]
    decided = r.get("decision") or {}
    text = f"gate {r.get('gate')}: {r.get('status')}"
    if decided:
        text += f" by {decided.get('approver')} ({decided.get('role')})"
        if decided.get("note"):
            text += f": {decided['note']}"
    if r.get("reason"):
        text += f" — {r['reason']}"
    return text


def _short(text: str) -> str:
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 1] + "…"

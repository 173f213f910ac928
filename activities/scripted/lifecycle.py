"""Scripts for the lifecycle agent: plan one lookup per id in the goal, then evaluate.

The planner is stubborn on purpose: after an error it plans the same call again, so
a goal naming an unknown id shows RECOVERING running out of retries.
"""

from __future__ import annotations

import json
import re

from activities.scripted import first_user_text
from tower import ToolCallRequest
from tower.testing import ModelRequest, Script

IDS = re.compile(r"\b(ACC|INV)-\d{4}\b")
TOOL_FOR = {"ACC": ("lookup_account", "account_id"), "INV": ("lookup_invoice", "invoice_id")}


def _wanted(goal: str) -> list[str]:
    return [m.group(0) for m in IDS.finditer(goal)]


def _found(request: ModelRequest) -> set[str]:
    return {m.group(0) for msg in request.messages if msg.role == "tool"
            for m in IDS.finditer(msg.content)}


def plan(request: ModelRequest) -> ToolCallRequest:
    goal = first_user_text(request)
    missing = [i for i in _wanted(goal) if i not in _found(request)]
    if not missing:
        return ToolCallRequest(name="search_docs", arguments={"query": goal[:200]})
    tool, arg = TOOL_FOR[missing[0][:3]]
    return ToolCallRequest(name=tool, arguments={arg: missing[0]})


def evaluate(request: ModelRequest) -> str:
    goal = first_user_text(request)
    wanted, found = _wanted(goal), _found(request)
    if wanted and all(i in found for i in wanted):
        return json.dumps({"solved": True, "answer": f"Looked up {', '.join(wanted)}: "
                           "all found; details are in the results."})
    if not wanted and any(m.role == "tool" for m in request.messages):
        return json.dumps({"solved": True, "answer": "See the documentation found."})
    return json.dumps({"solved": False, "answer": ""})


# Annotated: one script returns a tool call, the other text.
SCRIPTS: dict[str, Script] = {
    "PLANNING": plan,
    "EVALUATING": evaluate,
}

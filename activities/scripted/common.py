"""Helpers the scripts share: read the conversation the way a simple model would."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from tower import Message
from tower.contract.wire import ModelRequest, ToolCallRequest

# A node's script: the request in, the model's content (or one tool call) out.
Script = Callable[[ModelRequest], "str | ToolCallRequest"]


def first_user_text(request: ModelRequest) -> str:
    return next((m.content for m in request.messages if m.role == "user"), "")


def tool_results(request: ModelRequest, name: str | None = None) -> list[dict[str, Any]]:
    return [json.loads(m.content) for m in request.messages
            if m.role == "tool" and (name is None or m.name == name)]


def last_message(request: ModelRequest) -> Message | None:
    return request.messages[-1] if request.messages else None


def find_id(text: str, prefix: str) -> str | None:
    match = re.search(rf"\b{prefix}-\d{{4}}\b", text)
    return match.group(0) if match else None

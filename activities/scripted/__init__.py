"""The example agents' scripts for the offline scripted model: one module per agent, each a
``SCRIPTS`` mapping its nodes to pure functions of the request (``tower.testing.Script``);
and the small readers of a request those scripts share."""

from __future__ import annotations

import json
import re
from typing import Any

from tower import Message
from tower.testing import ModelRequest

__all__ = ["find_id", "first_user_text", "last_message", "tool_results"]


def tool_results(request: ModelRequest, name: str | None = None) -> list[dict[str, Any]]:
    """The results of the tools the request carries (of ``name`` only, if given)."""
    return [json.loads(m.content) for m in request.messages
            if m.role == "tool" and (name is None or m.name == name)]


def first_user_text(request: ModelRequest) -> str:
    return next((m.content for m in request.messages if m.role == "user"), "")


def last_message(request: ModelRequest) -> Message | None:
    return request.messages[-1] if request.messages else None


def find_id(text: str, prefix: str) -> str | None:
    """The first id such as ``INV-2004`` in ``text`` (``prefix`` "INV")."""
    match = re.search(rf"\b{prefix}-\d{{4}}\b", text)
    return match.group(0) if match else None

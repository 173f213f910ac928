"""A whole chat completion as the server-sent events a streamed one arrives in (the
loopback model server's streaming)."""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

# How the loopback server answers a streaming request: server-sent events (as OpenAI does),
# one whole JSON completion, a 400 when it carries stream_options, a 400 to any streaming one.
STREAMING = ("sse", "json", "no_stream_options", "no_stream")


def sse_chunks(payload: bytes) -> list[bytes]:
    """A complete chat completion as the chunks a streamed one arrives in: its text a word
    at a time, a refusal and each tool call whole, the finish, the usage, then [DONE]. A
    body that is not JSON (a "malformed" fault) goes out as is, for the client to reject."""
    try:
        done = json.loads(payload)
        message, finish = done["choices"][0]["message"], done["choices"][0]["finish_reason"]
    except (ValueError, KeyError, IndexError, TypeError):
        return [payload, b"[DONE]"]
    head = {"id": done["id"], "object": "chat.completion.chunk", "created": 0,
            "model": done["model"]}

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        return json.dumps({**head, "choices": [{"index": 0, "delta": delta,
                                                "finish_reason": finish_reason}]}).encode()

    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": piece}) for piece in words(message.get("content") or "")]
    if message.get("refusal"):
        out.append(chunk({"refusal": message["refusal"]}))
    for i, call in enumerate(message.get("tool_calls") or []):
        out.append(chunk({"tool_calls": [{"index": i, **call}]}))
    out.append(chunk({}, finish))
    out.append(json.dumps({**head, "choices": [], "usage": done["usage"]}).encode())
    return [*out, b"[DONE]"]


def text_of(event: bytes) -> str:
    """The text a streamed chunk carries ("" for a role, tool call, finish or usage)."""
    with contextlib.suppress(ValueError, KeyError, IndexError, TypeError, AttributeError):
        return str(json.loads(event)["choices"][0]["delta"].get("content") or "")
    return ""


def words(text: str) -> list[str]:
    return re.findall(r"\S+\s*|\s+", text)

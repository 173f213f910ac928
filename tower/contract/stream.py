"""A run's live stream (docs/streaming.md): per run, events with offsets 1, 2, 3, ..., a
kind and a small JSON body. A side channel: nothing here enters the history, and nothing
the run decides depends on it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

# The model's output, per attempt: a subscriber shows deltas of an attempt until it is
# discarded (a failed or superseded attempt) or finished.
MODEL_STARTED = "model_started"  # attempt, node, step
DELTA = "delta"  # attempt, text
MODEL_FINISHED = "model_finished"  # attempt; tool calls and structured output arrive whole
DISCARD = "discard"  # attempt, reason, retrying: forget that attempt's deltas
# Steps, published by the worker outside the workflow's sandbox (tower.temporal._stream_sink).
TRANSITION = "transition"
GATE_OPENED = "gate_opened"
GATE_DECIDED = "gate_decided"
TOOL_STARTED = "tool_started"
TOOL_FINISHED = "tool_finished"
RUN_END = "run_end"  # the run reached DONE or FAILED: the stream ends here
# A node's own event (``ctx.emit``: progress, partial results): step, node, label, data.
CUSTOM = "custom"
# A transition's own kind ("node", "route", "gate"...) in a transition event: ``move``, so
# it never hides the event's kind; an agent with ``stream_updates`` adds ``update``.
MOVE = "move"

# What ``ctx.emit`` accepts: a short label and a small JSON object.
LABEL_MAX = 100
CUSTOM_DATA_MAX = 16_384  # bytes of the data's JSON


@dataclass(frozen=True)
class StreamEvent:
    """One event as stored and read back; ``key`` makes publishing idempotent."""

    kind: str
    data: dict[str, Any] = field(default_factory=dict)
    key: str = ""
    offset: int = 0  # set by the store

    def as_json(self) -> dict[str, Any]:
        """The event as one JSON object: offset and kind, then its data (a transition stored
        before ``move`` existed had its own ``kind`` in the data: it becomes ``move``)."""
        data = dict(self.data)
        if self.kind == TRANSITION and "kind" in data:
            data.setdefault(MOVE, data["kind"])
        data.pop("kind", None)
        data.pop("offset", None)
        return {"offset": self.offset, "kind": self.kind, **data}


def custom_data(label: str, data: dict[str, Any] | None) -> dict[str, Any]:
    """What a node emits (``ctx.emit``) checked: the event's fields, or ValueError. Returned
    as a JSON round trip, so a reader gets exactly what was checked."""
    if not isinstance(label, str) or not label or len(label) > LABEL_MAX:
        raise ValueError(f"ctx.emit: label must be a non-empty string of at most {LABEL_MAX} "
                         f"characters, got {label!r:.120}")
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ValueError(f"ctx.emit: data must be a dict (a JSON object), got "
                         f"{type(data).__name__}")
    try:
        text = json.dumps(data, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"ctx.emit: data is not JSON: {exc}") from None
    if len(text.encode()) > CUSTOM_DATA_MAX:
        raise ValueError(f"ctx.emit: data is {len(text.encode())} bytes of JSON, more than "
                         f"{CUSTOM_DATA_MAX}; keep large results in the state")
    return {"label": label, "data": json.loads(text)}


def stream_name(namespace: str, workflow_id: str) -> str:
    """One stream per run (a chat thread's runs, continued-as-new, share it)."""
    return f"{namespace}/{workflow_id}"


# What a reply is doing, as ``Reply.state`` says it.
STREAMING = "streaming"  # an attempt's text is forming
RETRYING = "retrying"  # the attempt shown was lost (its worker died, it failed): another comes
FINISHED = "finished"  # the attempt shown is whole


@dataclass
class Reply:
    """What a subscriber shows of the model's output: the live attempt's text; a discard
    empties it (``retrying``, with the ``reason``). Pure, so every surface agrees: the final
    reply's text, once, however many attempts were lost."""

    attempt: str = ""
    text: str = ""
    discarded: list[str] = field(default_factory=list)
    state: str = ""
    reason: str = ""

    def take(self, event: StreamEvent) -> bool:
        """Fold one event in; True when the text or the state shown changed."""
        attempt = str(event.data.get("attempt", ""))
        if event.kind == MODEL_STARTED:
            # After a lost attempt, "retrying" stays until the new attempt's first word.
            self.attempt, self.text = attempt, ""
            if self.state != RETRYING:
                self.state, self.reason = STREAMING, ""
            return True
        if event.kind == DELTA and attempt == self.attempt:
            self.text += str(event.data.get("text", ""))
            self.state, self.reason = STREAMING, ""
            return True
        if event.kind == MODEL_FINISHED and attempt == self.attempt and self.attempt:
            self.state = FINISHED
            return True
        if event.kind == DISCARD and attempt not in self.discarded:
            self.discarded.append(attempt)
            if attempt == self.attempt:
                self.attempt, self.text, self.state = "", "", RETRYING
                self.reason = str(event.data.get("reason", ""))
                return True
        return False

    def as_json(self) -> dict[str, Any]:
        """The fold as the SSE endpoint sends it beside each model event."""
        return {"text": self.text, "state": self.state, "reason": self.reason}

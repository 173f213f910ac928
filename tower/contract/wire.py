"""Types that cross between workflow and activities: each input carries what one call
needs, never the whole state.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field

from tower.contract.messages import Message, Usage

# HTTP headers the model activity sends with each call: which agent and node asked, so an
# OpenAI-compatible test server (tower.testing.model_server) can answer per node.
AGENT_HEADER, NODE_HEADER = "X-Tower-Agent", "X-Tower-Node"


class MessageRef(BaseModel):
    """A message in the message store, as the workflow sees it: the content's hash and the
    small facts code decides on, never the content."""

    model_config = ConfigDict(frozen=True)

    ref: str  # content hash: the same message is stored once
    role: Literal["system", "user", "assistant", "tool"]
    chars: int = Field(ge=0)
    name: str | None = None  # the tool's name for role="tool"
    # Loaded as a one-line stub instead of its content: a large tool payload that a
    # context reduction dropped from the model's view (the content stays in the store).
    pruned: bool = False


def message_ref(message: Message) -> MessageRef:
    """The ref of ``message``: the hash of its role, name and content."""
    digest = hashlib.sha256(
        f"{message.role}\x00{message.name or ''}\x00{message.content}".encode()).hexdigest()
    # 128 bits: collision-free for any realistic store, and half the bytes in the history.
    return MessageRef(ref=digest[:32], role=message.role, name=message.name,
                      chars=len(message.content))


class StoredReply(BaseModel):
    """An update's result carrying a model's reply: ``reply``, or, when the model call's
    recorded result holds the text (``StoredReply.of``), only ``reply_ref``
    (``update_while_open`` fills it back in, checked against the digest)."""

    reply: str = ""
    reply_ref: MessageRef | None = None

    @classmethod
    def of(cls, text: str, *, from_model: bool = True, **fields: Any) -> Self:
        """The result for ``text``, the reply an update returns (``fields``: a subclass's).
        ``from_model``: ``text`` is a model's answer this run's history recorded (its model
        call's result; a windowed call keeps it in the message store too), so it travels as
        its ref; text the workflow wrote itself (a fixed fallback) is in no result: it travels
        whole."""
        if from_model and text:
            return cls(reply_ref=message_ref(Message(role="assistant", content=text)), **fields)
        return cls(reply=text, **fields)


class WindowRef(BaseModel):
    """A conversation window in the message store: one hash and the two numbers a route
    decides on."""

    model_config = ConfigDict(frozen=True)

    ref: str
    messages: int = Field(ge=0)  # the summary included
    tokens: int = Field(ge=0)  # estimated (tower/core/window.py)


class Reduction(BaseModel):
    """How a windowed call reduces its window (``WindowPolicy``'s part the activity uses)."""

    keep_recent: int = Field(ge=1)
    prune_chars: int = Field(ge=10)


class ToolSchema(BaseModel):
    """A tool as the model sees it (OpenAI function-tool shape)."""

    name: str
    description: str
    parameters: dict[str, Any]


class ModelRequest(BaseModel):
    agent: str
    node: str
    system: str
    messages: list[Message]
    tools: list[ToolSchema] = Field(default_factory=list)
    # JSON schema the answer must follow; validated again in the workflow.
    response_schema: dict[str, Any] | None = None
    response_name: str | None = None
    # Ordered fallbacks for this node; empty means the worker's configured list.
    models: list[str] = Field(default_factory=list)
    # Flat history: messages the activity loads from the message store and puts before
    # ``messages``, so the conversation's content is never in the activity's input.
    history: list[MessageRef] = Field(default_factory=list)
    # Store ``messages`` and the reply; their refs come back in ``ModelReply.stored``.
    keep: bool = False
    # Windowed calls: the activity loads this window (after ``history``, if any), and
    # returns the window with ``messages`` and the reply appended in ``ModelReply.window``
    # (never the refs as well). With ``summarise``, the window's older messages (and its
    # summary) are asked with ``messages`` instead, and the reply becomes the summary of
    # a window that keeps only the recent messages.
    window: WindowRef | None = None
    windowed: bool = False  # a window call with no window yet (the thread's first)
    summarise: Reduction | None = None


class ToolCallRequest(BaseModel):
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ModelReply(BaseModel):
    model: str  # which model answered ("scripted" offline)
    content: str | None = None
    tool_calls: list[ToolCallRequest] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    # With ``ModelRequest.keep``: refs of the request's messages, then of the reply.
    stored: list[MessageRef] = Field(default_factory=list)
    # With ``ModelRequest.window``/``windowed``: the window after this call.
    window: WindowRef | None = None


class Authority(BaseModel):
    """What the run authorizes a side effect to do, from the runtime, never from a node or
    the model: the run's limits and, when a gate approved this visit, the decision, the
    proposal shown and the edits. The tool checks it inside the effect's transaction."""

    limits: dict[str, Any] = Field(default_factory=dict)  # the run's policy ({}: none)
    decision_id: str = ""  # the approval that authorized this action ("" if none)
    proposal: dict[str, Any] = Field(default_factory=dict)  # what the approver was shown
    edits: dict[str, Any] = Field(default_factory=dict)  # what the approver changed

    @property
    def approved(self) -> dict[str, Any]:
        """The proposal with the edits in ({}: no approval)."""
        return {**self.proposal, **self.edits} if self.decision_id else {}


class ToolCall(BaseModel):
    """Input of every tool activity."""

    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    # Names the logical action (see tower/core/keys.py): every repeat of the same
    # action reuses it, so a side-effecting tool acts at most once per key.
    idempotency_key: str
    authority: Authority = Field(default_factory=Authority)
    # Not the effect: read what was made under the key, fencing off earlier attempts
    # (what a run does before it gives up on a side effect; tower.effects).
    reconcile: bool = False

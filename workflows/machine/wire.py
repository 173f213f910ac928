"""Types that cross between workflow and activities. Pure pydantic: both sides import them.

Activity inputs carry what one call needs, never the whole state.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from .state import Message, Usage


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


class ToolCallRequest(BaseModel):
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ModelReply(BaseModel):
    model: str  # which model answered ("scripted" offline)
    content: str | None = None
    tool_calls: list[ToolCallRequest] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)


class ToolCall(BaseModel):
    """Input of every tool activity."""

    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    # Derived from (run, step, call): a retried or replayed call reuses it, so a
    # side-effecting tool acts at most once per key.
    idempotency_key: str

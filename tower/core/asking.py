"""Asking a node's model, the pure part: build the request, check the reply, correct.

Every ``NodeContext`` asks through ``ask_validated``, so what counts as a valid answer is
one piece of code: a tool this node lacks, bad tool arguments or content failing the
schema are fed back up to ``max_corrections`` times, then the node fails.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from tower.contract.failures import brief
from tower.contract.wire import MessageRef, ModelReply, ModelRequest, ToolCallRequest, WindowRef
from tower.core.errors import NodeFailed
from tower.core.graph import Node
from tower.core.state import Message
from tower.core.tools import argument_problem, spec_for, specs_of

T = TypeVar("T", bound=BaseModel)


@dataclass
class Answer(Generic[T]):
    """A validated model answer: either tool calls (all allowed in this node) or content."""

    model: str
    text: str | None = None
    parsed: T | None = None
    tool_calls: list[ToolCallRequest] = field(default_factory=list)
    # With ``keep=True``: refs of the messages asked with, then of this answer.
    stored: list[MessageRef] = field(default_factory=list)
    # With ``ask_window``: the conversation window after this answer.
    window: WindowRef | None = None


# (conversation, schema) -> the model's reply; the context closes over the rest
ModelCall = Callable[[list[Message], type[BaseModel] | None], Awaitable[ModelReply]]


def model_request(agent: str, node: Node, convo: list[Message], schema: type[BaseModel] | None,
                  models: list[str], **extra: Any) -> ModelRequest:
    """What the model is asked: the node's prompt and only its own tools (``extra``: the
    stored history, the window, whether to keep the exchange)."""
    return ModelRequest(
        agent=agent, node=node.name, system=node.prompt, messages=convo,
        tools=[spec.schema() for spec in specs_of(node)],
        response_schema=schema.model_json_schema() if schema else None,
        response_name=schema.__name__ if schema else None, models=models, **extra,
    )


async def ask_validated(
    node: Node, call: ModelCall, messages: list[Message], *, schema: type[Any] | None,
    max_corrections: int,
) -> Answer[Any]:
    convo = list(messages)
    problem = ""
    for _ in range(max_corrections + 1):
        reply = await call(convo, schema)
        answer, problem = check_reply(node, reply, schema)
        if answer is not None:
            answer.stored, answer.window = reply.stored, reply.window
            return answer
        convo += [
            Message(role="assistant", content=reply.content or _dump_calls(reply)),
            Message(role="user", content=f"That answer was invalid: {problem}. Answer again."),
        ]
    raise NodeFailed(f"{node.name}: model output still invalid after {max_corrections} "
                     f"corrections: {problem}")


def check_reply(node: Node, reply: ModelReply, schema: type[T] | None
                ) -> tuple[Answer[T] | None, str]:
    """The validated answer, or None and what is wrong with it."""
    for call in reply.tool_calls:
        if call.name not in node.tools and call.name not in node.proposes:
            allowed = ", ".join((*node.tools, *node.proposes)) or "none"
            return None, f"tool {call.name!r} is not available here (available: {allowed})"
        spec = spec_for(node, call.name)
        problem = None if spec is None else argument_problem(spec, call.arguments)
        if problem is not None:
            return None, f"bad arguments for {call.name}: {problem}"
    if reply.tool_calls:
        return Answer(model=reply.model, tool_calls=reply.tool_calls), ""
    if not reply.content:
        return None, "empty answer"
    if schema is None:
        return Answer(model=reply.model, text=reply.content), ""
    try:
        parsed = schema.model_validate_json(reply.content)
    except ValidationError as exc:
        return None, f"answer does not match {schema.__name__}: {brief(exc)}"
    return Answer(model=reply.model, text=reply.content, parsed=parsed), ""


def _dump_calls(reply: ModelReply) -> str:
    return json.dumps([c.model_dump() for c in reply.tool_calls])

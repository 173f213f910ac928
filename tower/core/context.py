"""What a node may touch: the model, its own tools, the clock — ``NodeContext``.

A node gets a ``NodeContext`` and nothing else from the outside world. The asking is the
same wherever the run is hosted (the request, the checks of ``check_reply``, the
corrections, the usage kept); what reaches the world is the host's: on a worker
``tower.temporal._context.TemporalContext`` (every call an activity), in a unit test
``tower.testing``'s scripted one, which answers in-process. Pure: no Temporal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar, overload

from pydantic import BaseModel, ValidationError

from tower.contract.failures import NodeFailed, brief
from tower.contract.wire import (
    Authority,
    MessageRef,
    ModelReply,
    ModelRequest,
    Reduction,
    ToolCallRequest,
    WindowRef,
)
from tower.core.graph import Node
from tower.core.state import CallUsage, Message, Usage
from tower.core.tools import Tool, argument_problem, spec_for, specs_of

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


class NodeContext:
    """The one object a node reaches the world through. ``authority``: what this visit's
    side effects may do (from the runtime: the run's limits, the gate's approval);
    ``model_calls``: where each model call's usage is kept (the run's own list, for its
    cost query)."""

    models: list[str] = []  # ordered model fallbacks asked for ([]: the worker's list)

    def __init__(self, agent: str, node: Node, step: int, *, host: Any = None,
                 authority: Authority | None = None,
                 model_calls: list[CallUsage] | None = None) -> None:
        self.agent = agent  # the machine's name
        self.node = node  # the node running
        self.step = step  # the run's step when the node started
        self.authority = authority or Authority()
        self.decision = self.authority.decision_id  # the approval of this visit ("" if none)
        self.calls: list[str] = []  # what answered so far: "model:NAME", "tool:NAME"
        self.usage = Usage()  # model usage of this node so far
        self.model_calls = [] if model_calls is None else model_calls
        # The object that runs this machine: what a node that talks to the run's own
        # handlers (a chat's inbox) reads; the agent class in a unit test's runner.
        self.host = host

    @property
    def run_id(self) -> str:
        """The run's workflow id."""
        raise NotImplementedError

    def now(self) -> datetime:
        """The run's clock (deterministic on a worker)."""
        raise NotImplementedError

    # Without a schema nothing is parsed: ``Answer.parsed`` stays None, so the answer's
    # type is the plain ``Answer[BaseModel]`` rather than an unsolvable ``Answer[T]``.
    @overload
    async def ask(
        self, messages: list[Message], *, schema: None = None,
        max_corrections: int = 2, history: list[MessageRef] | None = None, keep: bool = False,
    ) -> Answer[BaseModel]: ...

    @overload
    async def ask(
        self, messages: list[Message], *, schema: type[T],
        max_corrections: int = 2, history: list[MessageRef] | None = None, keep: bool = False,
    ) -> Answer[T]: ...

    async def ask(
        self, messages: list[Message], *, schema: type[T] | None = None,
        max_corrections: int = 2, history: list[MessageRef] | None = None, keep: bool = False,
    ) -> Answer[T] | Answer[BaseModel]:
        """Ask the model with this node's prompt and tools; validate what comes back.

        Invalid output (a tool this node lacks, bad arguments, content that fails
        ``schema``) is fed back to the model up to ``max_corrections`` times, then
        the node fails with the last validation error.

        Flat history: ``history`` names stored messages the activity loads before
        ``messages``; ``keep`` stores ``messages`` and the answer and returns their refs
        in ``Answer.stored``. Either way, stored content never enters the event history.
        """
        extra = {"history": list(history or []), "keep": keep}
        return await self._ask(messages, schema, max_corrections, extra, local=False)

    async def ask_window(
        self, messages: list[Message], window: WindowRef | None, *,
        summarise: Reduction | None = None, max_corrections: int = 2,
    ) -> Answer[BaseModel]:
        """Ask with a stored conversation window; ``Answer.window`` is the window after it.

        The window travels as one ref, and on a worker the call runs as a local activity:
        its input (the new messages, the prompt, the tools) is not recorded, only its
        result, so a user's message that arrived in an update enters the history once.
        ``summarise``: reduce the window instead (the answer becomes its summary).
        """
        extra = {"history": [], "keep": True, "window": window,
                 "windowed": True, "summarise": summarise}
        return await self._ask(messages, None, max_corrections, extra, local=True)

    async def tool(self, tool: Tool | ToolCallRequest | str,
                   arguments: BaseModel | dict[str, Any] | None = None) -> dict[str, Any]:
        """Run one of this node's tools: ``ctx.tool(send_payment, Payment(...))`` (or a
        dict), or the model's call ``ctx.tool(answer.tool_calls[0])``. A side effect is
        told what the runtime knows the run authorizes (``authority``: its limits, the
        gate's approval); it checks that in its transaction, and a refusal raises
        ``EffectRefused``."""
        raise NotImplementedError

    def emit(self, label: str, data: dict[str, Any] | None = None) -> None:
        """Publish an event of this node to the run's live stream (progress, a partial
        result): kind ``custom`` with ``label`` and ``data`` (a JSON object, 16 KiB at
        most; ValueError otherwise). Outside the history: readers see it, the run never
        reads it back, a replay publishes nothing (docs/streaming.md)."""
        raise NotImplementedError

    async def child(self, run: Any, arg: Any, *, id: str,
                    memo: dict[str, Any] | None = None) -> Any:
        """Run a child agent (its ``@workflow.run`` method) to its end; its result."""
        raise NotImplementedError

    async def wait(self, until: Any) -> None:
        """Wait until ``until()`` is true (the run parks without holding a worker)."""
        raise NotImplementedError

    async def reply(self, request: ModelRequest, local: bool) -> ModelReply:
        """The host's: the model's reply to ``request`` (``local``: as a local call)."""
        raise NotImplementedError

    async def _ask(self, messages: list[Message], schema: type[Any] | None,
                   max_corrections: int, extra: dict[str, Any], *, local: bool) -> Answer[Any]:
        """What ``ask`` and ``ask_window`` share; ``extra``: the request's other fields."""
        node, convo, problem = self.node, list(messages), ""
        for _ in range(max_corrections + 1):
            request = ModelRequest(
                agent=self.agent, node=node.name, system=node.prompt, messages=convo,
                tools=[spec.schema() for spec in specs_of(node)],
                response_schema=schema.model_json_schema() if schema else None,
                response_name=schema.__name__ if schema else None, models=self.models,
                **extra)
            reply = await self.reply(request, local)
            self.calls.append(f"model:{reply.model}")
            self.usage = self.usage + reply.usage
            self.model_calls.append(CallUsage(step=self.step, node=node.name,
                                              model=reply.model, usage=reply.usage))
            answer, problem = check_reply(node, reply, schema)
            if answer is not None:
                answer.stored, answer.window = reply.stored, reply.window
                return answer
            said = reply.content or json.dumps([c.model_dump() for c in reply.tool_calls])
            convo += [
                Message(role="assistant", content=said),
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


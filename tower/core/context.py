"""What a node may touch, as a Protocol: the model, its own tools, the clock.

A node gets a ``NodeContext`` and nothing else from the outside world. On a worker it
is ``tower.temporal._context.TemporalContext`` (every call an activity); in a unit test
it is ``tower.testing``'s scripted one, which answers in-process. Pure: no Temporal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar, overload

from pydantic import BaseModel

from tower.contract.wire import Authority, MessageRef, Reduction, ToolCallRequest, WindowRef
from tower.core.cost import CallUsage
from tower.core.graph import Node
from tower.core.state import Message, Usage
from tower.core.tools import Tool

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


class NodeContext(Protocol):
    """The one object a node reaches the world through."""

    agent: str  # the machine's name
    node: Node  # the node running
    step: int  # the run's step when the node started
    calls: list[str]  # what answered so far: "model:NAME", "tool:NAME", "child:N"
    usage: Usage  # model usage of this node so far
    model_calls: list[CallUsage]  # each model call's usage, for the cost query
    decision: str  # the decision that approved this node visit ("" if none); not in keys
    authority: Authority  # what this visit's side effects may do (from the runtime)

    @property
    def run_id(self) -> str:
        """The run's workflow id."""
        ...

    def now(self) -> datetime:
        """The run's clock (deterministic on a worker)."""
        ...

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
        """Ask the model with this node's prompt and tools; validate what comes back."""
        ...

    async def ask_window(
        self, messages: list[Message], window: WindowRef | None, *,
        summarise: Reduction | None = None, max_corrections: int = 2,
    ) -> Answer[BaseModel]:
        """Ask with a stored conversation window; ``Answer.window`` is the window after it
        (``summarise``: reduce the window instead)."""
        ...

    async def tool(self, tool: Tool | ToolCallRequest | str,
                   arguments: BaseModel | dict[str, Any] | None = None) -> dict[str, Any]:
        """Run one of this node's tools: ``ctx.tool(send_payment, Payment(...))`` (or a
        dict), or the model's call ``ctx.tool(answer.tool_calls[0])``. A side effect is
        told what the runtime knows the run authorizes (``authority``: its limits, the
        gate's approval); it checks that in its transaction, and a refusal raises
        ``EffectRefused``."""
        ...

    def emit(self, label: str, data: dict[str, Any] | None = None) -> None:
        """Publish an event of this node to the run's live stream (progress, a partial
        result): kind ``custom`` with ``label`` and ``data`` (a JSON object, 16 KiB at
        most; ValueError otherwise). Outside the history: readers see it, the run never
        reads it back, a replay publishes nothing (docs/streaming.md)."""
        ...

    async def child(self, run: Any, arg: Any, *, id: str,
                    memo: dict[str, Any] | None = None) -> Any:
        """Run a child agent (its ``@workflow.run`` method) to its end; its result."""
        ...

    async def wait(self, until: Any) -> None:
        """Wait until ``until()`` is true (the run parks without holding a worker)."""
        ...

    @property
    def host(self) -> Any:
        """The object that runs this machine: what a node that talks to the run's own
        handlers (a chat's inbox) reads; the agent class in a unit test's runner."""
        ...

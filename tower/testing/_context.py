"""``NodeContext`` in-process: scripted model answers and tool answers, no server.

The model is asked through the same ``NodeContext._ask`` a worker uses (same request, same
checks, same corrections); the answers come from scripts, not from an activity.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from tower.contract.failures import NodeFailed, TowerError
from tower.contract.stream import custom_data
from tower.contract.wire import Authority, ModelReply, ModelRequest, ToolCallRequest, WindowRef
from tower.core.context import NodeContext
from tower.core.graph import Node
from tower.core.state import Usage
from tower.core.tools import Tool, argument_problem, called, spec_for

# What the model says to a request: content, or one tool call (the scripted model's shape).
Script = Callable[[ModelRequest], "str | ToolCallRequest"]
# A node's answers: a script, or a list of answers given in order (across its visits).
ModelAnswers = Script | Sequence["str | ToolCallRequest"]
# A tool's answer: a fixed result, a function of the arguments, or a function of the
# arguments and the call's Authority (what the run's state allows a side effect).
ToolAnswer = (Callable[[dict[str, Any]], dict[str, Any]]
              | Callable[[dict[str, Any], Authority], dict[str, Any]] | Mapping[str, Any])
TEST_MODEL = "scripted-test"


class Stuck(TowerError):
    """The run waits for something no one in the test will ever do (a user's message, a
    decision, an event): ``run_agent`` stops there, as a worker's run would wait. Not a
    node failure: nothing failed."""


class ScriptedContext(NodeContext):
    """A node's world in a unit test. ``model``: node -> answers; ``tools``: tool -> answer
    (a function of the arguments, or a fixed result); ``children``: child run -> result."""

    def __init__(
        self, agent: str, node: Node, step: int, *, model: Mapping[str, ModelAnswers],
        tools: Mapping[str, ToolAnswer], run_id: str, now: datetime, host: Any = None,
        children: Callable[[Any, Any], Any] | None = None, authority: Authority | None = None,
    ) -> None:
        super().__init__(agent, node, step, host=host, authority=authority)
        self.authorities: list[Authority] = []  # what each side effect was told
        self.requests: list[ModelRequest] = []  # what the model was asked, for assertions
        self.emitted: list[dict[str, Any]] = []  # the node's own events: {label, data}
        self._model, self._tools, self._children = model, tools, children
        self._run_id, self._now = run_id, now

    @property
    def run_id(self) -> str:
        return self._run_id

    def now(self) -> datetime:
        return self._now

    async def wait(self, until: Callable[[], bool]) -> None:
        if not until():
            raise Stuck(f"{self.node.name} waits for something the test never does")

    async def child(self, run: Any, arg: Any, *, id: str,
                    memo: dict[str, Any] | None = None) -> Any:
        if self._children is None:
            raise NodeFailed(f"{self.node.name}: no children in this test (children=...)")
        result = self._children(run, arg)
        return await result if inspect.isawaitable(result) else result

    def emit(self, label: str, data: dict[str, Any] | None = None) -> None:
        self.emitted.append(custom_data(label, data))  # checked as on a worker

    async def tool(self, tool: Tool | ToolCallRequest | str,
                   arguments: BaseModel | dict[str, Any] | None = None) -> dict[str, Any]:
        name, arguments = called(self.node, tool, arguments)
        spec = spec_for(self.node, name)
        problem = None if spec is None else argument_problem(spec, arguments)
        if problem is not None:  # the tool activity refuses bad arguments the same way
            raise NodeFailed(f"bad arguments for {name}: {problem}")
        answer = self._tools.get(name)
        if answer is None:
            raise NodeFailed(f"no answer for tool {name!r} in this test (tools={{...}})")
        # As on a worker: a side effect is told what the runtime knows, not the node's say.
        authority = self.authority if spec is None or spec.side_effect else Authority()
        self.calls.append(f"tool:{name}")
        self.authorities.append(authority)
        if not callable(answer):
            return dict(answer)
        takes_authority = len(inspect.signature(answer).parameters) > 1
        return dict(answer(arguments, authority) if takes_authority  # type: ignore[call-arg]
                    else answer(arguments))  # type: ignore[call-arg]

    async def reply(self, request: ModelRequest, local: bool) -> ModelReply:
        """The script's answer. A window is counted here, not stored: the reply's window
        has as many messages as were asked and answered (a summary resets it to one)."""
        self.requests.append(request)
        said = self._answer(request)
        reply = (ModelReply(model=TEST_MODEL, tool_calls=[said])
                 if isinstance(said, ToolCallRequest) else ModelReply(model=TEST_MODEL,
                                                                      content=said))
        reply.usage = Usage(calls=1)
        if request.windowed:
            before = request.window.messages if request.window and not request.summarise else 0
            count = before + (1 if request.summarise else len(request.messages) + 1)
            reply.window = WindowRef(ref=f"test-window-{self.step}-{count}", messages=count,
                                     tokens=count * 10)
        return reply

    def _answer(self, request: ModelRequest) -> str | ToolCallRequest:
        answers = self._model.get(self.node.name)
        if answers is None:
            raise NodeFailed(f"no model answers for node {self.node.name!r} in this test")
        if callable(answers):
            try:
                return answers(request)
            except Exception as exc:  # a bug in the script: say whose, at once
                name = getattr(answers, "__qualname__", repr(answers))
                exc.add_note(f"raised by the script for node {self.node.name!r} ({name})")
                raise
        if not isinstance(answers, list) or not answers:
            raise NodeFailed(f"node {self.node.name!r} asked the model more often than "
                             "this test scripted")
        return answers.pop(0)  # the runner's own copy: answers are used up across visits

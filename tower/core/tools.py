"""Tools as the engine sees them: one object each, made by ``@tool``. Nodes name their
tools with the objects, so a graph carries every tool it uses; a string names only an
external tool (``server.tool``, an MCP server's, listed when the worker starts).
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast

from pydantic import BaseModel, ValidationError

from tower.contract.failures import InvalidGraph, NodeFailed, brief
from tower.contract.wire import ToolSchema


class ToolSpec(Protocol):
    """What the engine needs to know of a tool: a ``Tool``, or an external tool's spec."""

    @property
    def name(self) -> str: ...

    @property
    def args(self) -> type[BaseModel]: ...

    @property
    def timeout_seconds(self) -> float: ...

    @property
    def side_effect(self) -> bool: ...  # changes the world: heartbeats, reconciled by key

    @property
    def attempts(self) -> int: ...  # Temporal's maximum attempts

    def schema(self) -> ToolSchema: ...


@dataclass(eq=False)  # one object per tool: compared by identity
class Tool:
    """A tool: name, typed arguments, whether it acts on the world, implementation. Its
    activity (named ``name``) is made by the worker hosting an agent that uses it."""

    name: str
    description: str
    args: type[BaseModel]
    fn: Callable[..., Any]
    # Acts on the world: exactly once per action (``tower.effects``), heartbeats, and is
    # reconciled by key; the gate's decision reaches it (``EffectCall.authority``).
    side_effect: bool = False
    # The implementation's parameter before the arguments (``db``): what the worker binds
    # (``TowerPlugin(bind={"db": SQLite(path)})``); None: the tool needs nothing bound.
    resource: str | None = None
    takes_call: bool = False  # a parameter after the arguments: the ``EffectCall``
    timeout_seconds: float = 10.0  # start-to-close per attempt
    attempts: int = 5  # Temporal's maximum attempts
    # A signal from the model to its node (e.g. advance_to_next_step): the node reads the
    # call; no activity runs it.
    control: bool = False

    def schema(self) -> ToolSchema:
        return ToolSchema(name=self.name, description=self.description,
                          parameters=_json_schema(self.args))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The implementation itself, called directly (a test's, say)."""
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<tool {self.name}>"


@functools.cache
def _json_schema(args: type[BaseModel]) -> dict[str, Any]:
    # Built once per process: every model call sends its node's tools.
    return args.model_json_schema()


def tool(fn: Callable[..., Any] | None = None, *, side_effect: bool = False,
         timeout_seconds: float = 10.0, attempts: int = 5, control: bool = False,
         description: str | None = None) -> Any:
    """Make ``fn`` a tool: ``@tool`` or ``@tool(side_effect=True)``.

    ``fn([resource,] args[, call])``: ``args`` is the parameter annotated with a pydantic
    model; a parameter before it is a resource the worker binds by name
    (``TowerPlugin(bind={"db": SQLite(path)})``); one after it gets the ``EffectCall``. The
    name is ``fn``'s, the description its docstring's first paragraph."""
    def make(f: Callable[..., Any]) -> Tool:
        params = list(inspect.signature(f).parameters)
        hints = typing.get_type_hints(f)
        at = next((i for i, p in enumerate(params) if isinstance(hints.get(p), type)
                   and issubclass(hints[p], BaseModel)), None)
        if at is None or at > 1 or len(params) > at + 2:
            raise TypeError(f"tool {f.__name__}: its parameters must be ([resource,] args[, "
                            "call]) with args annotated with a pydantic model")
        if side_effect and at == 0:
            raise TypeError(f"tool {f.__name__}: a side effect needs a database to act in "
                            "exactly once: its first parameter (bound where the worker is made)")
        doc = description if description is not None else inspect.getdoc(f) or ""
        return Tool(f.__name__, doc.split("\n\n")[0].replace("\n", " "), hints[params[at]],
                    f, side_effect=side_effect, resource=params[0] if at == 1 else None,
                    takes_call=len(params) > at + 1, timeout_seconds=timeout_seconds,
                    attempts=attempts, control=control)

    return make if fn is None else make(fn)


def own_tools(graph: str, node: str, tools: Iterable[Tool | str]) -> dict[str, Tool]:
    """A node's own tools' objects by name: one object per name, and a string only an
    external tool's name."""
    found: dict[str, Tool] = {}
    for t in tools:
        if isinstance(t, Tool):
            if found.setdefault(t.name, t) is not t:
                raise InvalidGraph(graph, f"node {node!r} has two different tools named "
                                          f"{t.name!r}")
        elif not (isinstance(t, str) and is_external(t)):
            raise InvalidGraph(graph, f"node {node!r}: {t!r} is not a tool: pass the object "
                                      "@tool made (a string names only an external "
                                      "'server.tool')")
    return found


def is_external(name: str) -> bool:
    """``server.tool``: served by something the worker connects to, checked at its start."""
    return "." in name


# Tools served from outside any catalogue (``server.tool``: an MCP server's) are known
# only once a worker has listed them: it registers them here at start-up, before it
# polls. The specs are data (schema, timeout), the same on every worker of a
# deployment; the activities that run the calls stay with the worker.
_EXTERNAL: dict[str, ToolSpec] = {}


def register_external(specs: Mapping[str, ToolSpec]) -> None:
    _EXTERNAL.update(specs)


def spec_for(node: Any, name: str) -> ToolSpec | None:
    """The spec of one of ``node``'s tools: its object, or an external one's (registered)."""
    spec: ToolSpec | None = node.specs.get(name)
    return spec if spec is not None else _EXTERNAL.get(name)


def specs_of(node: Any) -> list[ToolSpec]:
    """What the model is shown for ``node``: each of its tools that has a spec here."""
    return [spec for name in (*node.tools, *getattr(node, "proposes", ()))
            if (spec := spec_for(node, name)) is not None]


def argument_problem(spec: ToolSpec, arguments: dict[str, Any]) -> str | None:
    """Why ``arguments`` do not fit the tool, or None (a spec with ``check`` checks itself)."""
    if (check := getattr(spec, "check", None)) is not None:
        return cast("str | None", check(arguments))
    try:
        spec.args.model_validate(arguments)
    except ValidationError as exc:
        return brief(exc)
    return None


def called(node: Any, tool: Tool | str | Any, arguments: BaseModel | Mapping[str, Any] | None
           ) -> tuple[str, dict[str, Any]]:
    """The name and JSON arguments of ``ctx.tool(tool, arguments)`` in ``node``: ``tool`` is
    one of the node's ``Tool``s, a model's ``ToolCallRequest`` or an external name; else
    NodeFailed."""
    if isinstance(tool, Tool):
        name = tool.name
        if node.specs.get(name, tool) is not tool:
            raise NodeFailed(f"{tool!r} is not node {node.name!r}'s tool {name!r} "
                             "(another object)")
    elif isinstance(tool, str):
        if not is_external(tool):
            raise NodeFailed(f"ctx.tool({tool!r}): pass the tool object, not its name (a "
                             "string names only an external 'server.tool')")
        name = tool
    elif isinstance(getattr(tool, "name", None), str) and hasattr(tool, "arguments"):
        name, arguments = tool.name, tool.arguments if arguments is None else arguments
    else:
        raise NodeFailed(f"ctx.tool({tool!r}): not a tool")
    if name not in node.tools:
        only = " (only proposed here)" if name in node.proposes else ""
        raise NodeFailed(f"tool {name!r} is not available in state {node.name!r}{only}")
    if isinstance(arguments, BaseModel):
        return name, arguments.model_dump(mode="json")
    return name, dict(arguments or {})

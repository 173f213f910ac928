"""The tool catalogue as the engine sees it: names, argument schemas, timeouts.

The engine never imports a project's tools. An agent hands its graph the catalogue it
uses (``Graph(name, State, tools=CATALOGUE)``); ``compile()`` checks every node's
``tools=[...]`` against it and gives each node the specs of its own tools, which the
node's context reads for the model's tool list, argument checks and timeouts. A name
with a dot (``server.tool``, e.g. an MCP server's tool) is not in a catalogue at import
time: the worker checks those when it starts (``tower.temporal.worker.build_worker``).
Pure: no Temporal.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from tower.contract.wire import ToolSchema
from tower.core.errors import InvalidGraph


class ToolSpec(Protocol):
    """What the engine needs to know of a tool (``activities.tools.spec.Tool`` is one)."""

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


Catalogue = Mapping[str, ToolSpec]


@dataclass(frozen=True)
class ToolDef:
    """A tool declared in a project's own code: ``{"lookup": ToolDef("lookup", "...", Args)}``
    is a catalogue. The activity that runs it is the project's, named ``name``."""

    name: str
    description: str
    args: type[BaseModel]
    timeout_seconds: float = 10.0  # start-to-close per attempt
    # A side effect's activity is a ``tower.effects`` tool: exactly once per action, and it
    # answers the run's reconciliation (``ToolCall.reconcile``) itself.
    side_effect: bool = False
    attempts: int = 5

    def schema(self) -> ToolSchema:
        return ToolSchema(name=self.name, description=self.description,
                          parameters=self.args.model_json_schema())


def is_external(name: str) -> bool:
    """``server.tool``: served by something the worker connects to, checked at its start."""
    return "." in name


def resolve(graph: str, node: str, names: Iterable[str],
            catalogue: Catalogue | None) -> dict[str, ToolSpec]:
    """The specs of ``node``'s tools; InvalidGraph naming a tool the catalogue lacks."""
    specs: dict[str, ToolSpec] = {}
    for name in names:
        if is_external(name):
            continue
        if catalogue is None:
            raise InvalidGraph(graph, f"node {node!r} names tool {name!r} but the graph has "
                                      "no tool catalogue: Graph(name, State, tools=CATALOGUE)")
        spec = catalogue.get(name)
        if spec is None:
            known = ", ".join(sorted(catalogue)) or "none"
            raise InvalidGraph(graph, f"node {node!r} names unknown tool {name!r} "
                                      f"(the catalogue has: {known})")
        specs[name] = spec
    return specs


# Tools served from outside any catalogue (``server.tool``: an MCP server's) are known
# only once a worker has listed them: it registers them here at start-up, before it
# polls. The specs are data (schema, timeout), the same on every worker of a
# deployment; the activities that run the calls stay with the worker.
_EXTERNAL: dict[str, ToolSpec] = {}


def register_external(specs: Mapping[str, ToolSpec]) -> None:
    _EXTERNAL.update(specs)


def spec_for(node: Any, name: str) -> ToolSpec | None:
    """The spec of one of ``node``'s tools: from its catalogue, or registered external."""
    spec: ToolSpec | None = node.specs.get(name)
    return spec if spec is not None else _EXTERNAL.get(name)


def specs_of(node: Any) -> list[ToolSpec]:
    """What the model is shown for ``node``: each of its tools that has a spec here."""
    return [spec for name in (*node.tools, *getattr(node, "proposes", ()))
            if (spec := spec_for(node, name)) is not None]


def argument_problem(spec: ToolSpec, arguments: dict[str, Any]) -> str | None:
    """Why ``arguments`` do not fit the tool, or None. A spec with a ``check`` method
    (JSON-Schema tools) checks itself; others validate against their pydantic ``args``."""
    check = getattr(spec, "check", None)
    if check is not None:
        problem: str | None = check(arguments)
        return problem
    try:
        spec.args.model_validate(arguments)
    except ValidationError as exc:
        return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}"
                         for e in exc.errors()[:5])
    return None

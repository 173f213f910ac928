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
from typing import Protocol

from pydantic import BaseModel

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
    # A side effect also needs the project's ``reconcile_effect`` activity (docs/reliability.md).
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

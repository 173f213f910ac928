"""An agent is one file: ``@agent(GRAPH)`` names the workflow after its graph.

The graph's name is written once (``Graph("refund", ...)``); the decorator makes it the
workflow's name (``@workflow.defn(name=...)``), attaches the machine and the scripted
model's answers, and marks the class so a registry, the worker and the ``tower`` CLI
find it in its module (``load_agents``) — no name typed twice, no naming convention.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType
from typing import Any, TypeVar

from temporalio import workflow

from tower.core.errors import InvalidGraph
from tower.core.graph import Machine
from tower.temporal._start import EXTENDED, make_workflow

W = TypeVar("W", bound=type)
Script = Callable[[Any], Any]  # ModelRequest -> content or a ToolCallRequest
MARK = "__tower_agent__"


def agent(machine: Machine, *, scripts: Mapping[str, Script] | None = None
          ) -> Callable[[W], W]:
    """Make the decorated ``AgentWorkflow`` subclass the workflow named ``machine.name``.

    ``scripts`` (node -> script) are the offline scripted model's answers for this
    agent's nodes; a script for a node the machine lacks is an InvalidGraph.
    """
    unknown = sorted(set(scripts or {}) - set(machine.nodes))
    if unknown:
        raise InvalidGraph(machine.name, f"scripts for unknown node(s): {', '.join(unknown)}")

    def wrap(cls: W) -> W:
        cls.machine = machine  # type: ignore[attr-defined]
        cls.scripts = dict(scripts or {})  # type: ignore[attr-defined]
        setattr(cls, MARK, cls)  # a subclass is not an agent until it is decorated too
        make_workflow(cls)  # its init and run: admission, carried state, continue-as-new
        return workflow.defn(name=machine.name)(cls)

    return wrap


def is_agent(obj: object) -> bool:
    """An ``@agent`` class, or a subclass of one with a ``run`` of its own (the Temporal
    way: it replaces the agent it extends, under the same name)."""
    return isinstance(obj, type) and (obj.__dict__.get(MARK) is obj or obj in EXTENDED)


def agents_by_name(classes: Iterable[type]) -> dict[str, Any]:
    """``{machine name: class}``; two agents with one name is an error, unless one extends
    the other (the subclass is the one that runs)."""
    found: dict[str, Any] = {}
    for cls in classes:
        name = cls.machine.name  # type: ignore[attr-defined]
        if name in found and issubclass(found[name], cls):
            continue
        if name in found and found[name] is not cls and not issubclass(cls, found[name]):
            raise ValueError(f"two agents are named {name!r}: {found[name].__qualname__} and "
                             f"{cls.__qualname__}")
        found[name] = cls
    return found


def load_agents(*modules: str) -> dict[str, Any]:
    """Every ``@agent`` class in ``modules`` (a package: its submodules too), by name."""
    classes: list[type] = []
    for name in modules:
        for module in _walk(importlib.import_module(name)):
            classes += [obj for obj in vars(module).values()
                        if is_agent(obj) and obj.__module__ == module.__name__]
    if not classes:
        raise ValueError(f"no @agent classes in {', '.join(modules)}")
    return agents_by_name(classes)


def scripts_of(agents: Iterable[type]) -> dict[tuple[str, str], Script]:
    """The scripted model's table, ``(agent, node) -> script``, from the agents' files."""
    table: dict[tuple[str, str], Script] = {}
    for cls in agents:
        for node, script in getattr(cls, "scripts", {}).items():
            table[(cls.machine.name, node)] = script  # type: ignore[attr-defined]
    return table


def _walk(module: ModuleType) -> list[ModuleType]:
    found = [module]
    for info in pkgutil.iter_modules(getattr(module, "__path__", [])):
        found += _walk(importlib.import_module(f"{module.__name__}.{info.name}"))
    return found

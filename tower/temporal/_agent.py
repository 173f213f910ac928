"""An agent is one file: ``@agent(GRAPH)`` names the workflow after its graph.

The graph's name is written once (``Graph("refund", ...)``); the decorator makes it the
workflow's name (``@workflow.defn(name=...)``), attaches the machine and the scripted
model's answers, and marks the class so a registry, the worker and the ``tower`` CLI
find it in its module (``load_agents``) — no name typed twice, no naming convention.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from tower.core.errors import InvalidGraph
from tower.core.graph import Machine
from tower.temporal._start import INPUT_REFUSED, refuse, runtime_start

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
        runtime_start(cls)  # admission, carried state, continue-as-new: the runtime's
        _refuse_starts_that_do_not_fit(cls)
        return workflow.defn(name=machine.name)(cls)

    return wrap


def _refuse_starts_that_do_not_fit(cls: type) -> None:
    """Make a start whose arguments do not fit ``run`` fail the run, with the reason.

    Without this, the SDK's ``cls(*args)`` (``@workflow.init``) or ``run(*args)`` raised
    TypeError, which fails the workflow *task*: retried forever, the run never moving.
    A start that does not fit fails the run as refusing its input (``INPUT_REFUSED``)
    before anything else runs: in ``@workflow.init`` if the agent has one (``refuse``),
    else in ``run``."""
    found = [(n, f) for n, f in vars(cls).items() if getattr(f, "__temporal_workflow_run", 0)]
    if not found:
        return
    name, run = found[0]
    signature = inspect.signature(run)

    def problem(args: tuple[Any, ...]) -> str | None:
        try:
            signature.bind(None, *args)
        except TypeError as exc:
            return f"the start's {len(args)} argument(s) do not fit {cls.__name__}.{name}: {exc}"
        return None

    init = cls.__dict__.get("__init__")
    if init is not None and getattr(init, "__temporal_workflow_init", False):
        @functools.wraps(init)
        def checked_init(self: Any, *args: Any) -> None:
            why = problem(args)
            if why is None:
                init(self, *args)
            else:  # the run fails as its object is made (or, replayed, in ``run``)
                super(cls, self).__init__()  # type: ignore[arg-type]
                refuse(self, why)

        cls.__init__ = checked_init  # type: ignore[misc]

    @functools.wraps(run)
    async def checked_run(self: Any, *args: Any) -> Any:
        why = problem(args)
        if why is not None:
            raise ApplicationError(why, type=INPUT_REFUSED, non_retryable=True)
        return await run(self, *args)

    setattr(cls, name, checked_run)


def is_agent(obj: object) -> bool:
    return isinstance(obj, type) and obj.__dict__.get(MARK) is obj


def agents_by_name(classes: Iterable[type]) -> dict[str, Any]:
    """``{machine name: class}``; two agents with one name is an error."""
    found: dict[str, Any] = {}
    for cls in classes:
        name = cls.machine.name  # type: ignore[attr-defined]
        if name in found and found[name] is not cls:
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

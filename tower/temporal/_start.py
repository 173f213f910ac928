"""``@agent(GRAPH)``: an agent is one file, and the library makes its workflow class.

The graph's name becomes the workflow's; the decorator attaches the machine and the scripted
model's answers and marks the class, so the worker and the ``tower`` CLI find it in its
module (``load_agents``). From the agent's ``Input`` and ``start(self, request)`` (its first
state, a pure function of the input and ``self.limits``) ``@agent`` makes the
``@workflow.init`` and ``@workflow.run``: before the first step the run is admitted
(``MachineRun.admit``) when the agent has gates, a ``Policy`` or takes events, and takes a
carried state (the run's own continue-as-new, in a ``carry`` field added to the input
model; a gated run has it from ``@workflow.init``, so a decision in its first task is
judged).

A Temporal user may still write the ``run`` (an ``@workflow.run`` of an ``@agent`` class,
or of a plain ``@workflow.defn`` subclass of one): the runtime's start still comes first,
and a subclass gets the ``@workflow.init`` its own ``run``'s parameters ask for.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import typing
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError, create_model
from temporalio import workflow
from temporalio.common import RawValue

from tower.contract.failures import Code, InvalidGraph, TowerError, failure
from tower.core.carry import Carry
from tower.core.graph import Machine
from tower.temporal.payloads import UnopenablePayload

W = TypeVar("W", bound=type)
Script = Callable[[Any], Any]  # ModelRequest -> content or a ToolCallRequest
MARK = "__tower_agent__"
# Plain subclasses of agents with a run of their own: Tower's registry of them (load_agents).
EXTENDED: set[type] = set()


def agent(machine: Machine, *, scripts: Mapping[str, Script] | None = None
          ) -> Callable[[W], W]:
    """Make the decorated ``AgentWorkflow`` subclass the workflow named ``machine.name``.
    ``scripts`` (node -> script): the offline scripted model's answers for its nodes."""
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
    return {(cls.machine.name, node): script  # type: ignore[attr-defined]
            for cls in agents for node, script in getattr(cls, "scripts", {}).items()}


def _walk(module: ModuleType) -> list[ModuleType]:
    found = [module]
    for info in pkgutil.iter_modules(getattr(module, "__path__", [])):
        found += _walk(importlib.import_module(f"{module.__name__}.{info.name}"))
    return found


def make_workflow(cls: type) -> None:
    """Give the ``@agent`` class ``cls`` the runtime's ``@workflow.init`` and
    ``@workflow.run``; an own ``run`` (``@workflow.run``) is called after the start."""
    own_run = cls.__dict__.get("run")
    start = getattr(cls, "start", None)
    given: Any = getattr(cls, "Input", None) or _input_of(own_run or start)
    if not (isinstance(given, type) and issubclass(given, BaseModel)):
        raise TypeError(f"{cls.__name__}: an agent's start takes its input model: "
                        "def start(self, request: MyRequest) -> MyState")
    cls.Input = given  # type: ignore[attr-defined]
    if own_run is None and (start is None or getattr(start, "__isabstractmethod__", False)):
        raise TypeError(f"{cls.__name__}: an agent says how a run starts: "
                        "def start(self, request) -> its first state")
    carries = getattr(cls, "carries_over", True) and "carry" not in given.model_fields
    started: type[BaseModel] = create_model(  # the input as it travels: + the runtime's carry
        given.__name__, __base__=given, __module__=given.__module__,
        **({"carry": (Carry | None, None)} if carries else {}))  # type: ignore[call-overload]
    returns = cls.machine.state_type  # type: ignore[attr-defined]
    own_init = cls.__dict__.get("__init__")
    plain_init = own_init if own_init is not None and not _made(own_init) else _plain(cls)
    cls.plain_init = plain_init  # type: ignore[attr-defined]  # an instance outside a run

    def __init__(self: Any, *args: Any) -> None:
        plain_init(self)
        if len(args) != 1:  # a raw start with two values: refused, never retried forever
            refuse(self, f"the start's {len(args)} argument(s) do not fit {cls.__name__}.run: "
                         f"it takes one input ({given.__name__})")
            return
        request, why = opened(args[0], started)
        if why:
            refuse(self, why)
        else:
            self.take_start(request)

    async def run(self: Any, *args: Any) -> Any:
        self._started()  # an input refused, replayed (``refuse``): the run fails as it did
        request = self._start_input  # opened in __init__ (a subclass's own init, typed)
        await self._begin(request)
        if own_run is not None:
            return await own_run(self, request)
        return await self.run_from(self.start(request), request)

    # Taken raw and opened here (``opened``): an input the SDK failed to open failed the
    # run with a pydantic dump, and every later query on it with the SDK's "Expected
    # workflow input. This is a Python SDK bug."
    _sign(cls, __init__, "__init__", None)
    _sign(cls, run, "run", returns, doc=getattr(own_run, "__doc__", None))
    cls.__init__ = workflow.init(__init__)  # type: ignore[misc]
    cls.run = workflow.run(run)  # type: ignore[attr-defined]


def match_init(cls: type) -> None:
    """A plain subclass of an agent with a ``run`` of its own (the Temporal way): give it
    the ``@workflow.init`` the SDK asks for, with its ``run``'s parameters, unless it
    wrote one."""
    run = cls.__dict__.get("run")
    if run is None or not hasattr(cls, "machine"):
        return
    EXTENDED.add(cls)
    if "__init__" in cls.__dict__:
        return
    params = list(inspect.signature(run).parameters.values())
    base_init = _plain(cls)

    def __init__(self: Any, *args: Any) -> None:
        base_init(self)
        if len(args) == 1:
            self.take_start(args[0])

    __init__.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    __init__.__annotations__ = {k: v for k, v in getattr(run, "__annotations__", {}).items()
                                if k != "return"}
    __init__.tower_made = True  # type: ignore[attr-defined]
    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    __init__.__module__ = cls.__module__
    cls.__init__ = workflow.init(__init__)  # type: ignore[misc]


def _plain(cls: type) -> Callable[[Any], None]:
    """The nearest base's plain ``__init__`` (no input), under the runtime's."""
    for base in cls.__mro__[1:]:
        found = base.__dict__.get("plain_init") or base.__dict__.get("__init__")
        if found is not None and not _made(found):
            return found
    return object.__init__


def _input_of(fn: Any) -> Any:
    """The type of ``fn``'s input parameter (after ``self``), if it says one."""
    if fn is None:
        return None
    params = list(inspect.signature(fn).parameters)[1:]
    return typing.get_type_hints(fn).get(params[0]) if params else None


def _made(init: Any) -> bool:
    return bool(getattr(init, "tower_made", False))


def _sign(cls: type, fn: Callable[..., Any], name: str, returns: Any, *,
          doc: str | None = None) -> None:
    # One raw input parameter (the SDK checks that init and run take the same); *args
    # keeps a misfit start from raising TypeError, which would retry its task forever.
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    request = inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                annotation=RawValue)
    fn.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [self_param, request], return_annotation=inspect.Signature.empty if returns is None
        else returns)
    fn.__annotations__ = {"request": RawValue, "return": returns}
    fn.__name__ = name
    fn.__qualname__ = f"{cls.__name__}.{name}"
    fn.__module__ = cls.__module__
    fn.__doc__ = doc


def opened(raw: RawValue, model: type[BaseModel]) -> tuple[Any, str]:
    """The run's input as ``model``, or (None, why it is refused, in one line): a value
    that is not the agent's input is the requester's, and fails the run (``refuse``)."""
    try:
        return workflow.payload_converter().from_payload(raw.payload, model), ""
    except ValidationError as exc:
        return None, f"not a valid {model.__name__}: {problems(exc)}"
    except UnopenablePayload as exc:  # a codec or store reference the worker cannot open
        return None, str(exc)
    except Exception as exc:  # noqa: BLE001  (not JSON, an unknown encoding: said as is)
        return None, f"cannot be opened: {type(exc).__name__}: {exc}"


def refuse(run: Any, why: str) -> None:
    """Fail ``run`` (a workflow object being made) as refusing its input, from ``__init__``
    so that it fails before any handler runs (an update sent with the start is rejected).
    Replayed (a query on the closed run), the object is made and ``run`` raises the same:
    an ``__init__`` raising again would leave the query unanswered until it timed out."""
    run._input_refused = why
    if not workflow.unsafe.is_replaying():
        raise failure(TowerError(why, code=Code.INPUT_REFUSED))


def problems(exc: ValidationError) -> str:
    """A pydantic error in one line, without the values it refused (a requester's)."""
    return "; ".join(f"field {'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}"
                     for e in exc.errors())

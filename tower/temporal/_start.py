"""How a run starts: the runtime's, so that an agent file carries no Temporal plumbing.

An agent writes its ``@workflow.run`` as Temporal teaches (take the input, build the
first state, ``await self.drive(state)``). ``@agent`` wraps it so that, before the agent's
own code runs, the runtime

- admits the input (``Admission.admit``: the tenant's roster and policy; the limits are
  ``self.limits``) when the agent has gates, a ``Policy`` or takes events;
- takes a carried state (the run's own continue-as-new): ``drive`` goes on from it, and
  a gated run has it from ``@workflow.init`` so a decision in its first task is judged;
- and continues-as-new with the same input plus the carry when the history grows.

The carry travels in a ``carry`` field the runtime adds to the agent's input model (the
wire shape agents used to declare themselves), so recorded histories keep replaying.
Only the run's own continue-as-new may hand over state: ``carry_refused`` and
``origin_refused`` (tower/temporal/_machine_run.py) refuse any other.
"""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel, ValidationError, create_model
from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

from tower.core.carry import Carry
from tower.temporal._unopenable import UnopenablePayload

__all__ = ["INPUT_REFUSED", "opened", "refuse", "runtime_start"]

# The failure type of a run whose input its agent refused: it never took a step.
INPUT_REFUSED = "InputRefused"


def runtime_start(cls: type) -> None:
    """Wrap ``cls``'s own ``@workflow.run`` (and make its ``@workflow.init``) with the
    runtime's start; an agent that handles carry itself (an input with a ``carry`` field,
    its own ``carry_input`` or ``@workflow.init``) is left as it is."""
    own_run = cls.__dict__.get("run")
    given: Any = getattr(cls, "Input", None)
    if (own_run is None or not hasattr(own_run, "__temporal_workflow_run")
            or not isinstance(given, type) or not issubclass(given, BaseModel)
            or "carry" in given.model_fields or "carry_input" in cls.__dict__
            or hasattr(cls.__dict__.get("__init__"), "__temporal_workflow_init")):
        return
    carries = getattr(cls, "carries_state", True)
    started: type[BaseModel] = create_model(  # the input as it travels: + the runtime's carry
        given.__name__, __base__=given, __module__=given.__module__,
        **({"carry": (Carry | None, None)} if carries else {}))  # type: ignore[call-overload]
    returns = typing.get_type_hints(own_run).get("return", Any)
    plain_init = (cls.__dict__.get("__init__") or getattr(cls, "plain_init", None)
                  or cls.__mro__[1].__init__)  # type: ignore[misc]
    cls.plain_init = plain_init  # type: ignore[attr-defined]  # an instance outside a run

    def __init__(self: Any, request: RawValue) -> None:
        plain_init(self)
        self._start_input, why = opened(request, started)
        if why:
            refuse(self, why)
        elif carries:
            self.take_carried(self._start_input.carry)

    async def run(self: Any, request: RawValue) -> Any:
        if self._input_refused:  # replayed (refuse): the run fails as it did
            raise ApplicationError(self._input_refused, type=INPUT_REFUSED,
                                   non_retryable=True)
        await self._begin(self._start_input)
        return await own_run(self, self._start_input)

    for fn, name, ret in ((__init__, "__init__", None), (run, "run", returns)):
        fn.__name__ = name
        fn.__qualname__ = f"{cls.__name__}.{name}"
        fn.__module__ = cls.__module__
        fn.__doc__ = getattr(cls.__dict__.get(name), "__doc__", None)
        # Taken raw and opened here (``opened``): an input the SDK failed to open failed
        # the run with a pydantic dump, and every later query on it with the SDK's
        # "Expected workflow input. This is a Python SDK bug."
        fn.__annotations__ = {"request": RawValue, "return": ret}
    cls.__init__ = workflow.init(__init__)  # type: ignore[misc]
    cls.run = workflow.run(run)  # type: ignore[attr-defined]


def opened(raw: RawValue, model: type[BaseModel]) -> tuple[Any, str]:
    """The run's input as ``model``, or (None, why it is refused, in one line): a value
    that is not the agent's input (a list, a number, a field missing or too long, one the
    worker cannot open) is the requester's, and fails the run (``refuse``)."""
    try:
        return workflow.payload_converter().from_payload(raw.payload, model), ""
    except ValidationError as exc:
        return None, f"not a valid {model.__name__}: {problems(exc)}"
    except UnopenablePayload as exc:  # a codec or store reference the worker cannot open
        return None, str(exc)
    except Exception as exc:  # noqa: BLE001  (not JSON, an unknown encoding: said as is)
        return None, f"cannot be opened: {type(exc).__name__}: {exc}"


def refuse(run: Any, why: str) -> None:
    """Fail ``run`` (a workflow object being made) as refusing its input: ApplicationError
    ``INPUT_REFUSED``, raised from ``__init__`` so that the run fails before any handler
    runs (an update sent with the start is rejected, never left waiting). Replayed (a
    query on the closed run), the object is made instead, and ``run`` raises the same:
    an ``__init__`` that raises again would leave the query unanswered until it timed
    out. Its queries then fail with the reason (``MachineRun._started``)."""
    run._input_refused = why
    if not workflow.unsafe.is_replaying():
        raise ApplicationError(why, type=INPUT_REFUSED, non_retryable=True)


def problems(exc: ValidationError) -> str:
    """A pydantic error in one line, without the values it refused (a requester's)."""
    return "; ".join(f"field {'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}"
                     for e in exc.errors())

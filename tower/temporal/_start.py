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

from pydantic import BaseModel, create_model
from temporalio import workflow

from tower.core.carry import Carry

__all__ = ["runtime_start"]


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

    def __init__(self: Any, request: Any) -> None:
        plain_init(self)
        self._start_input = request
        if carries:
            self.take_carried(request.carry)

    async def run(self: Any, request: Any) -> Any:
        await self._begin(request)
        return await own_run(self, request)

    for fn, name, ret in ((__init__, "__init__", None), (run, "run", returns)):
        fn.__name__ = name
        fn.__qualname__ = f"{cls.__name__}.{name}"
        fn.__module__ = cls.__module__
        fn.__doc__ = getattr(cls.__dict__.get(name), "__doc__", None)
        fn.__annotations__ = {"request": started, "return": ret}
    cls.__init__ = workflow.init(__init__)  # type: ignore[misc]
    cls.run = workflow.run(run)  # type: ignore[attr-defined]

"""A tool's activity, made from its object (``tower.core.tools.Tool``) and what it is bound to:
a side effect runs exactly once per action in its database; a read on a ``tower.effects``
database without its write lock; any other resource is given as it is.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python
from temporalio import activity

from tower.contract.wire import ToolCall
from tower.core.tools import Tool
from tower.effects._tool import EffectCall, EffectTool, arguments

UNBOUND = object()


def invoke(tool: Tool, resource: Any, args: BaseModel, call: EffectCall) -> Any:
    """``tool``'s implementation on what it takes: ([resource,] args[, call])."""
    head = () if tool.resource is None else (resource,)
    return tool.fn(*head, args, *((call,) if tool.takes_call else ()))


def effect_of(tool: Tool) -> EffectTool[Any]:
    """A side-effecting ``tool`` as a ``tower.effects`` tool: exactly once per key."""
    return EffectTool(tool.name, tool.args, lambda tx, args, call: invoke(tool, tx, args, call))


def activity_for(tool: Tool, bound: Any = UNBOUND) -> Callable[..., Any]:
    """The activity that runs ``tool`` with ``bound`` (what its resource parameter gets)."""
    if tool.side_effect:
        return effect_of(tool).on(bound)
    # On a tower.effects database: its ``read`` (no write lock), else a transaction of its own.
    on_db = getattr(bound, "read", None) or (getattr(bound, "run", None)
                                             if hasattr(bound, "for_update") else None)

    def prepare(call: ToolCall) -> tuple[BaseModel, EffectCall]:
        return (arguments(tool.name, tool.args, call),
                EffectCall(tool.name, call.idempotency_key, call.authority))

    if inspect.iscoroutinefunction(tool.fn):
        async def run_async(call: ToolCall) -> Any:
            args, context = prepare(call)
            return to_jsonable_python(await invoke(tool, bound, args, context))

        run: Callable[..., Any] = run_async
    else:
        def run_sync(call: ToolCall) -> Any:
            args, context = prepare(call)
            if on_db is not None:
                return to_jsonable_python(on_db(lambda tx: invoke(tool, tx, args, context)))
            return to_jsonable_python(invoke(tool, bound, args, context))

        run = run_sync
    # Activity names are part of the history's contract: the tool's name, always (the
    # function's, as the SDK and TowerPlugin name an activity).
    run.__name__ = run.__qualname__ = tool.name
    return activity.defn(run)


def run_tool(tool: Tool, bound: Any, call: ToolCall, *, epoch: int | None = None) -> Any:
    """``tool`` on ``bound``, called as its activity would be (a test's direct call): a side
    effect exactly once per ``call.idempotency_key`` (``epoch``: the attempt's, for tests of
    the fence); a refusal raises the failure of an ``EffectRefused``."""
    if tool.side_effect:
        return effect_of(tool).call(bound, call, epoch=epoch)
    return activity_for(tool, bound)(call)

"""Only a ``tower.effects`` tool is ever asked to reconcile.

Before a run gives up on a side-effecting tool it calls its activity again with
``ToolCall.reconcile``. A tool written without ``tower.effects`` would take that for a new
call (the payment made again), so ``TowerPlugin`` puts this guard on every worker: a
reconcile call reaches only an activity ``EffectTool.on`` made (``MARK``); any other fails,
not retryable, before it runs (``Code.NOT_AN_EFFECT``).
"""

from __future__ import annotations

from typing import Any

from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from tower.contract.failures import Code, TowerError, failure

MARK = "__tower_effect__"  # set on the activities EffectTool.on makes


def is_effect(fn: Any) -> bool:
    return getattr(fn, MARK, False) is True


def asks_reconcile(args: Any) -> bool:
    """Whether an activity's input is a reconcile call (a ``ToolCall``, or its dict)."""
    return any(getattr(arg, "reconcile", None) is True
               or (isinstance(arg, dict) and arg.get("reconcile") is True) for arg in args)


class OnlyEffectsReconcile(Interceptor):
    """Fails a reconcile call to an activity that is not a ``tower.effects`` tool."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Inbound(next)


class _Inbound(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        if asks_reconcile(input.args) and not is_effect(input.fn):
            name = getattr(input.fn, "__name__", "?")
            raise failure(TowerError(
                f"{name} is declared a side effect but its activity is not a tower.effects "
                "tool: it cannot say whether it acted, so it was not called again (that "
                "would act twice). Make it @tool(side_effect=True) to have the run "
                "reconcile it", code=Code.NOT_AN_EFFECT))
        return await super().execute_activity(input)

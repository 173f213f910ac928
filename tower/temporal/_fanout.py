"""Map-reduce over child agents: a node starts one child workflow per item, waits for
all of them, and returns their results for the state's reducers to merge.

A failed child (its workflow execution failed: a FAILED agent raises ``AgentFailed``,
so the parent sees a ``ChildWorkflowError``; or ``failed(result)`` says so) follows the declared
policy: ``fail`` the parent's node, ``skip`` it (recorded), or ``retry`` it as a new
child (``/retryN`` in its id, so every attempt is its own visible run) and fail the
node once the retries are spent.

A child's id is ``<agent>-<first run id>/<node>-<step>/<item>``: the parent's agent and the
first run id of its chain, both read from its history, never its workflow id, so a recorded
run replays under whatever workflow id a Replayer is given.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, Field
from temporalio import workflow
from temporalio.exceptions import ChildWorkflowError

from tower.contract.failures import NodeFailed
from tower.core.context import NodeContext

I = TypeVar("I")  # noqa: E741
R = TypeVar("R")


class OnChildFailure(StrEnum):
    FAIL = "fail"
    SKIP = "skip"
    RETRY = "retry"


class FanOutPolicy(BaseModel):
    on_failure: OnChildFailure = OnChildFailure.FAIL
    retries: int = Field(2, ge=0, le=5)  # extra attempts per child with RETRY
    max_children: int = Field(50, ge=1, le=500)


@dataclass
class ChildOutcome(Generic[I, R]):
    index: int
    item: I
    result: R | None  # None when the child failed
    reason: str = ""  # why it failed
    attempts: int = 1

    @property
    def ok(self) -> bool:
        return self.result is not None


async def fan_out(
    ctx: NodeContext, child_run: Any, items: Sequence[I], make_input: Callable[[I, int], Any],
    *, policy: FanOutPolicy, failed: Callable[[Any], str | None] = lambda _: None,
) -> list[ChildOutcome[I, Any]]:
    """Run ``child_run`` (a ``@workflow.run`` method) once per item, all at once.

    ``make_input(item, attempt)`` builds each child's input; ``failed(result)`` says
    why a child that completed still counts as failed (e.g. it ended FAILED), or None.
    Raises NodeFailed when the policy says the parent's node fails.
    """
    if len(items) > policy.max_children:
        raise NodeFailed(f"{ctx.node.name}: {len(items)} items is more than the "
                         f"{policy.max_children} children the policy allows")
    # The children's ids (the module doc); a test run in process is named by its run id.
    info = workflow.info() if workflow.in_workflow() else None
    parent = f"{info.workflow_type}-{info.first_execution_run_id}" if info else ctx.run_id
    attempts = 1 + (policy.retries if policy.on_failure == OnChildFailure.RETRY else 0)

    async def one(index: int, item: I) -> ChildOutcome[I, Any]:
        reason = ""
        for attempt in range(attempts):
            suffix = f"{index}/retry{attempt}" if attempt else f"{index}"
            child_id = f"{parent}/{ctx.node.name}-{ctx.step}/{suffix}"
            ctx.calls.append(f"child:{suffix}")
            try:
                result = await ctx.child(child_run, make_input(item, attempt), id=child_id)
            except ChildWorkflowError as exc:  # a FAILED child: its AgentFailed is the cause
                reason = str(exc.cause or exc)
                continue
            reason = failed(result) or ""
            if not reason:
                return ChildOutcome(index, item, result, attempts=attempt + 1)
        return ChildOutcome(index, item, None, reason, attempts)

    outcomes = list(await asyncio.gather(*(one(i, item) for i, item in enumerate(items))))
    bad = [o for o in outcomes if not o.ok]
    if bad and policy.on_failure != OnChildFailure.SKIP:
        first = bad[0]
        raise NodeFailed(f"{len(bad)} of {len(items)} children failed "
                         f"(policy {policy.on_failure.value}); item {first.index} "
                         f"{first.item!r} after {first.attempts} attempt(s): {first.reason}")
    return outcomes

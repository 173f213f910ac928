"""The node context on a worker: the model, the node's tools, children and the clock,
each backed by Temporal (activities, local activities, child workflows, ``workflow.now``).

It is one implementation of ``tower.core.context.NodeContext``; ``tower.testing`` has
the in-process one. Tools come from the node (``.node(..., tools=[send_payment])``: the
objects themselves); the engine never imports a project's tools.

A model call is a local activity (only its result is recorded), or an activity on the task
queue (any worker may take it; heartbeats notice a lost worker). A store a call needs that
fails the attempt never fails the run: a local call then goes to the queue, and a queued
call or a tool is asked again until a worker can serve it (``wait_for_store``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from tower.contract.failures import (
    NOT_MADE,
    STORE_WAITS,
    Code,
    EffectRefused,
    NodeFailed,
    code_of,
    failure_reason,
    rebuilt,
    waits_for_store,
)
from tower.contract.stream import TOOL_FINISHED, TOOL_STARTED, custom_data
from tower.contract.wire import Authority, ModelReply, ModelRequest, ToolCall, ToolCallRequest
from tower.core.context import NodeContext
from tower.core.graph import Node
from tower.core.keys import Action, effect_key
from tower.core.state import CallUsage
from tower.core.tools import Tool, ToolSpec, called, spec_for
from tower.temporal import _stream_sink as stream_sink
from tower.temporal._task_time import call_activity, wait_for_store

# Let Temporal own retries so every attempt is visible in the event history.
TOOL_RETRY = RetryPolicy(maximum_interval=timedelta(seconds=30), maximum_attempts=5,
                         non_retryable_error_types=[*NOT_MADE])
# A side effect heartbeats while it waits for its database: a dead worker is noticed fast.
TOOL_HEARTBEAT = timedelta(seconds=3)
# Reading back an effect by key must outlast a slow database: it is what lets a run that
# gave up on a tool say truthfully whether the effect was made.
RECONCILE_RETRY = RetryPolicy(maximum_interval=timedelta(seconds=10))
MODEL_RETRY = dataclasses.replace(TOOL_RETRY, maximum_attempts=6,
                                  non_retryable_error_types=[Code.MODEL_REQUEST_REJECTED])
# A local call's store errors go straight to the queue's workers (``reply``).
LOCAL_RETRY = dataclasses.replace(MODEL_RETRY, non_retryable_error_types=[
    Code.MODEL_REQUEST_REJECTED, *STORE_WAITS])
# A lost worker's call is retried elsewhere this soon (plus MODEL_RETRY's first second),
# and its readers told (tower/activities/model_stream.py). The activity beats every third
# of it; the SDK sends at most one beat per 80% of it.
MODEL_HEARTBEAT = timedelta(seconds=3)


class TemporalContext(NodeContext):
    """``NodeContext`` on a worker. ``host`` is the workflow instance running the node;
    ``action`` what this visit's side effects' keys name."""

    def __init__(self, agent: str, node: Node, step: int, models: list[str],
                 host: Any = None, authority: Authority | None = None,
                 action: Action | None = None, model_calls: list[CallUsage] | None = None
                 ) -> None:
        super().__init__(agent, node, step, host=host, authority=authority,
                         model_calls=model_calls)
        self.models = models
        self.action = action or Action(node.name, 0)
        self._emitted = 0  # this visit's own events so far: part of each one's key

    @property
    def run_id(self) -> str:
        return workflow.info().workflow_id

    def now(self) -> datetime:
        return workflow.now()

    def emit(self, label: str, data: dict[str, Any] | None = None) -> None:
        # Checked on every pass (replay too), published only while not replaying: no
        # command, no history event; a retried task republishes the same keys (dropped).
        event = custom_data(label, data)
        self._emitted += 1
        stream_sink.emit_custom(self.step, self._emitted, self.node.name, event)

    async def wait(self, until: Callable[[], bool]) -> None:
        await workflow.wait_condition(until)

    async def child(self, run: Any, arg: Any, *, id: str,
                    memo: dict[str, Any] | None = None) -> Any:
        return await workflow.execute_child_workflow(run, arg, id=id, memo=memo)

    async def tool(self, tool: Tool | ToolCallRequest | str,
                   arguments: BaseModel | dict[str, Any] | None = None) -> dict[str, Any]:
        """Run one of this node's tools as an activity, with the action's idempotency key.

        A side effect is told what the run authorizes (``self.authority``: the run's
        limits, the gate's approval); it checks that in the effect's transaction. A refusal
        raises ``EffectRefused``. A side effect that failed otherwise (timed out, retries
        spent) is reconciled by key first: if it was made after all, its result is returned.
        """
        name, arguments = called(self.node, tool, arguments)
        # A worker checks at start that it has every tool its agents name; only a
        # replayer without the MCP servers lacks an external spec: replay compares the
        # activity's name, not its options, and reads the result from the history.
        spec = spec_for(self.node, name) or Tool(name, "", BaseModel, fn=lambda: None,
                                                 timeout_seconds=60.0)
        info = workflow.info()
        nth = self.calls.count(f"tool:{name}")
        key = effect_key(workflow_id=info.workflow_id, chain=info.first_execution_run_id,
                         action=self.action, tool=name, nth=nth, arguments=arguments)
        grant = self.authority if spec.side_effect else Authority()
        stream_sink.emit_tool(TOOL_STARTED, self.step, name, nth, node=self.node.name)
        try:
            result = await self._run_tool(name, spec, ToolCall(
                tool=name, arguments=arguments, idempotency_key=key, authority=grant))
        except (ActivityError, EffectRefused) as exc:
            stream_sink.emit_tool(TOOL_FINISHED, self.step, name, nth, node=self.node.name,
                                  ok=False)
            if isinstance(exc, ActivityError):  # the tool's own words, as a node failure
                raise NodeFailed(failure_reason(exc)) from exc
            raise
        stream_sink.emit_tool(TOOL_FINISHED, self.step, name, nth, node=self.node.name, ok=True)
        self.calls.append(f"tool:{name}")
        return result

    async def _run_tool(self, name: str, tool: ToolSpec, call: ToolCall) -> dict[str, Any]:
        retry = dataclasses.replace(TOOL_RETRY, maximum_attempts=tool.attempts)
        while True:
            try:
                return await call_activity(
                    name, call, result_type=dict,
                    start_to_close_timeout=timedelta(seconds=tool.timeout_seconds),
                    heartbeat_timeout=TOOL_HEARTBEAT if tool.side_effect else None,
                    retry_policy=retry, summary=f"{self.node.name} · tool {name}")
            except ActivityError as exc:
                if not waits_for_store(exc):  # the same call again once the store is back
                    return await self._failed(name, tool, call, exc)
            await wait_for_store()

    async def _failed(self, name: str, tool: ToolSpec, call: ToolCall, exc: ActivityError
                      ) -> dict[str, Any]:
        """A tool call whose attempts all failed: its refusal, or what it made if it made
        anything, else its error. What a side effect made is read back under the call's key
        by the tool's own activity, asked to reconcile: every effect tool reconciles itself."""
        found = rebuilt(exc)
        if isinstance(found, EffectRefused):  # the node may route on its code
            raise EffectRefused(found.code, found.reason, tool=name) from exc
        if not tool.side_effect or code_of(found) in NOT_MADE:
            raise exc
        try:
            made: dict[str, Any] | None = await call_activity(
                name, call.model_copy(update={"reconcile": True}), result_type=dict,
                start_to_close_timeout=timedelta(seconds=30), heartbeat_timeout=TOOL_HEARTBEAT,
                schedule_to_close_timeout=timedelta(minutes=10), retry_policy=RECONCILE_RETRY,
                summary=f"{self.node.name} · reconcile {name}")
        except ActivityError as err:  # a tool not made with tower.effects (effects/_tool.py)
            again = rebuilt(err)
            if again is not None and again.code == Code.NOT_AN_EFFECT:
                raise NodeFailed(f"{name} failed and cannot be reconciled: {again}") from err
            raise
        if made is None:  # nothing was made, and now nothing can be
            raise exc
        return made

    async def reply(self, request: ModelRequest, local: bool) -> ModelReply:
        if local:  # one marker holding the result; a lost worker is noticed at the task timeout
            try:  # (no summary: one more payload to convert on every replay)
                return await workflow.execute_local_activity(
                    "call_model", request, result_type=ModelReply,
                    start_to_close_timeout=timedelta(seconds=120), retry_policy=LOCAL_RETRY)
            except (ActivityError, ApplicationError) as exc:
                # (A local activity's failure arrives as its own error, not wrapped.)
                if not waits_for_store(exc):
                    raise
        while True:  # on the task queue, asked again while its store fails
            try:
                # The activity heartbeats while it waits for the model: a worker killed
                # mid-call is noticed in seconds, not at the start-to-close timeout.
                return await call_activity(
                    "call_model", request, result_type=ModelReply,
                    start_to_close_timeout=timedelta(seconds=120), retry_policy=MODEL_RETRY,
                    heartbeat_timeout=MODEL_HEARTBEAT, summary=f"{request.node} · model")
            except ActivityError as exc:
                if not waits_for_store(exc):
                    raise
            await wait_for_store()

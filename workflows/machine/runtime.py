"""Run a Machine inside a Temporal workflow.

Each agent subclasses ``AgentWorkflow`` with its own ``@workflow.defn(name=...)``
and ``@workflow.run``; the loop, the queries, the search attributes and the Web
UI's current details live here once. The loop is the checkpoint: every model
and tool call inside a node is an activity, so its result is in the history and
a new worker resumes from there.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel
from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

from . import search
from .context import NodeContext
from .engine import Transition, advance, fail, start
from .errors import NodeFailed
from .graph import TERMINALS, Machine
from .state import AgentState


class AgentWorkflow:
    """Base of every agent workflow. Subclasses set ``machine`` and ``Input``."""

    machine: ClassVar[Machine]
    Input: ClassVar[type[BaseModel]]
    # Ordered model fallbacks for this agent; empty means the worker's list.
    models: ClassVar[list[str]] = []

    def __init__(self) -> None:
        self._state: AgentState | None = None
        self._log: list[Transition] = []

    async def drive(self, state: AgentState) -> AgentState:
        """Run the machine from its entry node until DONE or FAILED."""
        self._record(*start(self.machine, state, at=workflow.now(), event_id=_event_id()))
        while self.current.node not in TERMINALS:
            await self._step()
        return self.current

    @property
    def current(self) -> AgentState:
        assert self._state is not None, "the run has not started"
        return self._state

    async def _step(self) -> None:
        state = self.current
        node = self.machine.nodes[state.node]
        ctx = NodeContext(self.machine.name, node, state.step, list(self.models))
        try:
            update = dict(await node.fn(ctx, state))
        except (NodeFailed, ActivityError) as exc:
            self._record(*fail(self.machine, state, _reason(exc), at=workflow.now(),
                               event_id=_event_id(), calls=ctx.calls))
            return
        if ctx.usage.calls:
            update["usage"] = ctx.usage
        self._record(*advance(self.machine, state, node.name, update, at=workflow.now(),
                              event_id=_event_id(), calls=ctx.calls))

    def _record(self, state: AgentState, transition: Transition) -> None:
        self._state = state
        self._log.append(transition)
        workflow.upsert_search_attributes([
            search.AGENT_NAME.value_set(self.machine.name),
            search.AGENT_NODE.value_set(state.node),
            search.AGENT_STATUS.value_set(state.status.value),
            search.AGENT_STEP.value_set(state.step),
        ])
        workflow.set_current_details(
            f"**{self.machine.name}** · state `{state.node}` · {state.status.value} · "
            f"step {state.step}\n\nlast move: {transition.source} → {transition.target} "
            f"({transition.reason})"
        )

    @workflow.query(name="state")
    def query_state(self) -> dict[str, Any]:
        return self._state.model_dump(mode="json") if self._state else {}

    @workflow.query(name="status")
    def query_status(self) -> str:
        return self._state.status.value if self._state else "STARTING"

    @workflow.query(name="transitions")
    def query_transitions(self) -> list[Transition]:
        return list(self._log)


def _event_id() -> int:
    return workflow.info().get_current_history_length()


def _reason(exc: BaseException) -> str:
    # An activity's own message is in its cause; "Activity task failed" says nothing.
    while isinstance(exc, ActivityError) and exc.cause is not None:
        exc = exc.cause
    if isinstance(exc, ApplicationError) and exc.type:
        return f"{exc.type}: {exc.message}"
    return str(exc)

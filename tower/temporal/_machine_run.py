"""What every agent workflow has, whatever moves its machine: the host of the one loop.

``MachineRun`` is the Temporal host of tower/core/interpreter.py's loop: the clock is
``workflow.now``, a node's calls are activities (``TemporalContext``), each move is recorded
into the state, the transition log, the queries, the search attributes, the Web UI's current
details and the live stream. A run that ends FAILED fails its workflow execution with a
non-retryable ``AgentFailed`` naming the agent, node and step (seen in the Web UI, list
queries, alerts, ``result()``; ``tower retry`` recovers it). ``AgentWorkflow`` and
``EventWorkflow`` (tower/temporal/_runtime.py) say what a step is.

Admission: a run that needs them (gated agents, those with a ``Policy``, event-driven ones)
loads its tenant's roster and policy (``load_trust``) at start and refuses an input that
tries to loosen either; a gate re-reads the roster while it waits (_gate.py).
"""

from __future__ import annotations

from abc import abstractmethod
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel
from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError
from temporalio.service import RPCError, RPCStatusCode

from tower.contract import names, search
from tower.contract.failures import AgentFailed, Code, NodeFailed, TowerError, failure
from tower.contract.pending import PendingView
from tower.contract.trust import TrustRequest, TrustSnapshot
from tower.core.carry import Carry, LogSummary, summarize
from tower.core.details import render_details
from tower.core.engine import Transition, start
from tower.core.gates import pending_record
from tower.core.graph import FAILED, TERMINALS, Machine
from tower.core.keys import action_of, authority_of
from tower.core.policy import effective
from tower.core.state import AgentState, CallUsage, Status, cost_report
from tower.temporal import _stream_sink as stream_sink
from tower.temporal._context import TemporalContext
from tower.temporal._start import match_init
from tower.temporal._task_time import call_activity

if TYPE_CHECKING:
    from temporalio.client import Client

# What a closed execution tells without an upsert: Completed is DONE, Failed is FAILED
# (search.status_clause); the node and step at the end are in the run's result or failure.
_EXECUTION_STATUS_SAYS = {search.AGENT_NODE.name, search.AGENT_STATUS.name,
                          search.AGENT_STEP.name}


ORIGIN_ACTIVITY = "tower_continued_from"  # the activity below, named by its function
# Retried until TRUST_DEADLINE, not a fixed number of times: workers killed one after
# another (a deploy, a crash loop) must not fail a run before its first step. A missing
# or invalid roster or policy (TrustMissing) is not retried: waiting cannot fix it.
TRUST_RETRY = RetryPolicy(maximum_interval=timedelta(seconds=10),
                          non_retryable_error_types=[Code.TRUST_MISSING])
TRUST_DEADLINE = timedelta(minutes=5)


class _NothingAsked(BaseModel):
    """The input of a carried run, as far as its limits go: its state already holds them."""


class Trust:
    """A run's roster and policy snapshot (``snapshot``, None until admitted) and when it
    was read (``read_at``): read at admission and when the run's gate re-reads it, taken
    from the run's own continue-as-new."""

    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        self.snapshot: TrustSnapshot | None = None
        self.read_at: datetime | None = None

    async def read(self) -> TrustSnapshot:
        """Read the roster and policy (again); raises the failure of ``Code.TRUST_MISSING``
        when they cannot be read, keeping the snapshot it had. Either way ``read_at`` is
        now: a failed re-read is not tried again at once."""
        try:  # in a task (``call_activity``): a parked run re-reads it, decisions may come
            snapshot = await call_activity(
                "load_trust", TrustRequest(tenant=workflow.info().namespace,
                                           agent=self.machine.name),
                result_type=TrustSnapshot, start_to_close_timeout=timedelta(seconds=30),
                schedule_to_close_timeout=TRUST_DEADLINE, retry_policy=TRUST_RETRY,
                summary="trust: the tenant's roster and policy")
        except ActivityError as exc:
            self.read_at = workflow.now()
            cause = exc.cause if exc.cause is not None else exc
            raise failure(TowerError(f"cannot load the tenant's roster and policy: "
                                     f"{getattr(cause, 'message', cause)}",
                                     code=Code.TRUST_MISSING)) from None
        self.snapshot, self.read_at = snapshot, workflow.now()
        return snapshot


class MachineRun:
    """Base of every agent workflow. Subclasses set ``machine`` (``@agent`` does) and
    ``Input``, and say what a ``step`` is; a run that needs its tenant's roster and policy
    is admitted first (``admit``)."""

    # A node failed: it raised NodeFailed, or an activity it called failed for good.
    node_failures: ClassVar[tuple[type[BaseException], ...]] = (NodeFailed, ActivityError)
    # May the run continue-as-new between steps (when Temporal suggests it, or past
    # ``continue_as_new_after``)? If so, its input takes a carry (tower/temporal/_start.py).
    carries_over: ClassVar[bool] = True

    machine: ClassVar[Machine]
    # The agent's limits (a model whose fields say which way is stricter), or None.
    Policy: ClassVar[type[BaseModel] | None] = None
    # Does the runtime admit every run's input before the agent's own code (tower/temporal/
    # _start.py)? None: when the agent has gates or a Policy.
    admits: ClassVar[bool | None] = None
    Input: ClassVar[type[BaseModel]]
    # Ordered model fallbacks for this agent; empty means the worker's list.
    models: ClassVar[list[str]] = []
    # Continue-as-new once the history has this many events, even before Temporal
    # suggests it (None: only when suggested). Only agents with ``carry_input`` do.
    continue_as_new_after: int | None = None
    # Upsert the search attributes at every transition (one history event each) instead
    # of only when the status changes, the run parks (``publish``) or it ends.
    publish_every_step: ClassVar[bool] = False
    # Each transition event on the run's live stream carries the update it applied
    # (LangGraph's ``updates`` mode); outside the history, off as updates can be large.
    stream_updates: ClassVar[bool] = False
    # The workflow task timeout Tower starts its runs with (None: the server's 10 s). A short
    # one (3 s) suits an agent whose model calls are local activities (``ask_window``): a lost
    # worker's call runs again within seconds; elsewhere it times out more tasks on a loaded
    # host (docs/reliability.md).
    task_timeout: ClassVar[timedelta | None] = None

    def __init__(self) -> None:
        self.trust = Trust(self.machine)  # the roster and policy: read once admitted
        # The agent's limits: the tenant's policy, tightened by the run's input (None for
        # an agent without a Policy). Set by admission, before the agent's run code.
        self.limits: Any = None
        self._start_input: BaseModel | None = None  # as the run was started (_start.py)
        self._input_refused = ""  # why its agent refused that input (_start.refuse), if it did
        self._carry_in: Carry | None = None  # the carried state the run started with
        self._state: AgentState | None = None
        self._log: list[Transition] = []
        self._carried: LogSummary | None = None
        # The state after every step, kept only when a replay inspector asks for it
        # (tower.temporal.replay sets it to []): a live run keeps one state in memory.
        self.trace: list[AgentState] | None = None
        self._calls: list[CallUsage] = []
        self._pending_memo: dict[str, Any] | None = None
        # Started with its attributes (search.start_attributes): the end leaves what
        # ExecutionStatus says (DONE, FAILED) to it, unless another attribute changes.
        self._end_in_execution_status = False

    if TYPE_CHECKING:  # made by @agent (tower/temporal/_start.py), typed for callers
        async def run(self, request: Any) -> Any: ...

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        match_init(cls)  # a plain subclass with a run of its own: the init the SDK asks for

    @abstractmethod
    def start(self, request: Any) -> AgentState:
        """The agent's: the run's first state, from its input (and ``self.limits``, the
        tenant's policy as the input tightened it). Pure: no I/O, no clock."""

    async def run_from(self, state: AgentState, request: Any) -> AgentState:
        raise NotImplementedError  # the agent base's

    def take_start(self, request: Any) -> None:
        """The runtime's ``@workflow.init``: keep the input. A gated run continued-as-new
        takes its carried state and roster snapshot now, so a decision that reaches it in its
        first workflow task is judged, not refused as "not started yet". Only from the run's
        own continue-as-new (``carry_refused``: not a raw, cron or retry start's input, which
        ``run_machine`` then refuses); the run still re-reads the roster at once."""
        self._start_input = request
        carry: Carry | None = getattr(request, "carry", None)
        if carry is None or carry.trust is None or carry_refused(carry) is not None:
            return
        self._state = self.machine.state_type.model_validate(carry.state)
        self.trust.snapshot = carry.trust

    async def _begin(self, request: BaseModel) -> None:
        """The runtime's start (tower/temporal/_start.py), before the agent's run code."""
        self._carry_in = getattr(request, "carry", None)
        if self.admits if self.admits is not None else bool(self.machine.gates or self.Policy):
            await self.admit(request)

    async def admit(self, request: BaseModel) -> Any:
        """Bring the tenant's roster and policy into the run; return the agent's limits
        (``Policy``'s, tightened by ``request``), or None for an agent without a Policy.
        Once admitted, the run's limits are returned again.

        Refuses (the run fails at once, with the reason) an input that loosens a limit, a
        gated agent on a cron schedule, and a tenant without a roster and policy
        (``TrustMissing``). A carried run's state already holds its limits: its input
        tightens nothing."""
        if self.trust.read_at is not None:  # admitted (a carried snapshot is read again)
            return self.limits
        if self.machine.gates and workflow.info().cron_schedule:
            # Every cron run repeats the requester's first input and counts as continued:
            # a gated agent starts only as a run of its own (`tower run`), never on a cron.
            raise failure(TowerError(
                f"agent {self.machine.name!r} has approval gates and refuses a cron schedule "
                f"({workflow.info().cron_schedule!r}): start each run on its own (a "
                "Temporal Schedule may start them); docs/approvals.md",
                code=Code.INPUT_REFUSED))
        snapshot = await self.trust.read()
        if self.Policy is not None:
            self.limits = effective(self.Policy, snapshot.policy.agents.get(
                self.machine.name, {}), _NothingAsked() if self._carry_in is not None else request)
        if snapshot.policy.unsigned_allowed:
            workflow.upsert_search_attributes([search.UNSIGNED_DECISIONS.value_set(True)])
        return self.limits

    def on_start(self, state: AgentState) -> None:
        """Called once the run's first state is known (its start, or the state it carried
        over), before the first step: an agent that keeps more than its state (timers,
        counters) sets it up here. Must not block; may start tasks."""

    async def step(self) -> None:
        raise NotImplementedError  # the agent base's

    async def settle(self) -> None:
        """The run reached a terminal: whatever must happen before it ends."""

    async def run_machine(self, state: AgentState) -> AgentState:
        """The loop. A run continued-as-new goes on from its carried state, on its node, with
        no new START transition. A carry that is not the run's own fails the run at once, and
        so does a gated agent that did not ``admit`` its input (no roster: no decision could
        count)."""
        if self.machine.gates and self.trust.snapshot is None:
            raise failure(TowerError(
                f"agent {self.machine.name!r} has approval gates but no roster and policy: "
                "call `await self.admit(request)` before `drive`", code=Code.TRUST_MISSING))
        carried = self._carry_in
        if carried is not None:
            state = self.machine.state_type.model_validate(carried.state)
        self.on_start(state)
        # The pending request the memo shows as the run starts: a continued run's copy of its
        # own, or one forged by whoever started it (the start memo is the client's to set):
        # the first ``publish`` compares the run's own view with it and clears a forgery.
        self._pending_memo = workflow.memo_value(search.PENDING_MEMO, None)
        if carried is None:
            # Decided from the start event, so a replay decides the same; a continued run
            # (its attributes copied from the run before) keeps the upsert at its end.
            self._end_in_execution_status = search.started_with_attributes(
                workflow.info().typed_search_attributes)
            self.record(*start(self.machine, state, at=self.now(), event_id=self.event_id()))
        elif (refused := carry_refused(carried) or await origin_refused()) is not None:
            raise failure(TowerError(refused, code=Code.INPUT_REFUSED))
        else:
            self._state, self._carried = state, carried.log
            self.publish()
        while self.current.node not in TERMINALS:
            if (self.carries_over and self.carry_over_due()
                    and workflow.all_handlers_finished()):
                self.carry_over()
            await self.step()
        await self.settle()
        if self.current.node == FAILED:  # a failed execution wherever Temporal users look
            last, state = (self._log[-1] if self._log else None), self.current
            raise failure(AgentFailed(
                state.errors[-1] if state.errors else (last.reason if last else "failed"),
                agent=self.machine.name, node=last.source if last else state.node,
                step=state.step))
        return self.current

    # --- the host of the loop (tower/core/interpreter.py) --------------------------------

    def now(self) -> datetime:
        return workflow.now()

    def event_id(self) -> int:
        return workflow.info().get_current_history_length()

    def context(self, node: str, *, visit: bool = False) -> TemporalContext:
        # A gate's re-check, an entry action: no authority of their own.
        state = self.current
        return TemporalContext(
            self.machine.name, self.machine.nodes[node], state.step, list(self.models), self,
            authority=authority_of(state, node, self.Policy) if visit else None,
            action=action_of(state, node) if visit else None, model_calls=self._calls)

    @property
    def state(self) -> AgentState | None:  # None until the run has started
        return self._state

    @property
    def current(self) -> AgentState:
        assert self._state is not None, "the run has not started"
        return self._state

    def carry_input(self, carry: Carry) -> Any | None:
        """The input of this agent's next run: its own, with ``carry``; None: this agent
        does not continue-as-new."""
        start = self._start_input
        if start is None or "carry" not in type(start).model_fields:
            return None
        return start.model_copy(update={"carry": carry})

    def carry_over_due(self) -> bool:
        info = workflow.info()
        limit = self.continue_as_new_after
        return (info.is_continue_as_new_suggested()
                or (limit is not None and info.get_current_history_length() >= limit))

    def carry(self) -> Carry:
        return Carry(run_id=workflow.info().run_id, state=self.current.model_dump(mode="json"),
                     log=summarize(self._carried, self._log), trust=self.trust.snapshot)

    def carry_over(self) -> None:
        """Continue-as-new with the state and the log summary, if this agent can. Call it
        only once ``workflow.all_handlers_finished()``: a handler cut off loses its reply."""
        args = self.carry_input(self.carry())
        if args is not None:
            self.publish()
            workflow.continue_as_new(args)

    def publish(self, *, ending: bool = False) -> None:
        """Upsert (one history event) the search attributes that changed. Call it before
        the run parks on a long wait."""
        state = self.current
        wanted = search.state_attributes(self.machine.name, state)
        if state.errors:  # why it failed, searchable
            wanted.append((search.AGENT_ERROR, state.errors[-1][:256]))
        pending = pending_record(state)
        # Gated agents only: a run with no gate gets no such attribute.
        if self.machine.gates:
            wanted.append((search.AGENT_GATE_ROLE, pending.role if pending else ""))
        have = dict(workflow.info().typed_search_attributes)  # one lookup each, not a scan
        changed = [key.value_set(value) for key, value in wanted if have.get(key) != value]
        if (ending and self._end_in_execution_status
                and {u.key.name for u in changed} <= _EXECUTION_STATUS_SAYS):
            changed = []  # the closing execution says it; anything else rides along
        # A request is published (its status and role, its memo) only with its attestation:
        # until then nothing of it shows, and a memo the run carried over is taken down.
        shown, view = self.request_shown(state)
        if changed and shown:
            workflow.upsert_search_attributes(changed)
        # A run waiting at a gate shows the request in its memo (None once decided), so
        # `tower pending` and the inbox need no worker.
        memo = view.memo() if view else None
        if memo != self._pending_memo:
            workflow.upsert_memo({search.PENDING_MEMO: memo})
            self._pending_memo = memo

    def request_shown(self, state: AgentState) -> tuple[bool, PendingView | None]:
        """Whether ``state`` may be published, and the request its memo shows (the gate's)."""
        return True, None

    def record(self, state: AgentState, transition: Transition) -> None:
        before = self._state
        self._state = state
        self._log.append(transition)
        if self.trace is not None:
            self.trace.append(state)
        # An upsert is a history event: spend it when the status changes or the run
        # ends, not at every step (the live node is in the queries and current details).
        if (self.publish_every_step or before is None or before.status != state.status
                or state.node in TERMINALS):
            self.publish(ending=state.node in TERMINALS)
        self.show_details()
        stream_sink.emit_move(before, state, transition, self.stream_updates)

    def show_details(self) -> None:
        # The Web UI's current details. A closed run keeps the last: a worker answers the
        # Web UI's query for it by replaying the run to its end.
        workflow.set_current_details(render_details(
            self.machine, self.current, self._log[-1] if self._log else None,
            workflow.info().workflow_id, self._log))

    def _started(self) -> None:
        """A run whose agent refused its input fails with the reason, and so does a query on
        it: it has no state, status, cost or steps (an empty answer would read as "starting")."""
        if self._input_refused:
            raise failure(TowerError(self._input_refused, code=Code.INPUT_REFUSED))

    @workflow.query(name=names.STATE.name)
    def query_state(self) -> dict[str, Any]:
        self._started()
        return self._state.model_dump(mode="json") if self._state else {}

    @workflow.query(name=names.STATUS.name)
    def query_status(self) -> str:
        """The run's status; RUNNING while a request waits for its attestation, as its
        search attributes say (a client that sees AWAITING_APPROVAL finds the request)."""
        self._started()
        if self._state is None:
            return "STARTING"
        if not self.request_shown(self._state)[0]:
            return Status.RUNNING.value
        return self._state.status.value

    @workflow.query(name=names.COST.name)
    def query_cost(self) -> dict[str, Any]:
        """Tokens and estimated dollars: the run's, each node's, each model call's."""
        self._started()
        return cost_report(self._state, self._calls) if self._state else {}

    @workflow.query(name=names.TRANSITIONS.name)
    def query_transitions(self) -> list[Transition]:
        """This run's transitions; earlier runs of a continued thread are in ``log_summary``."""
        self._started()
        return list(self._log)

    @workflow.query(name=names.LOG_SUMMARY.name)
    def query_log_summary(self) -> LogSummary:
        self._started()
        return summarize(self._carried, self._log)


def carry_refused(carry: Carry) -> str | None:
    """Why ``carry`` is not this run's own (None when it is): only a run's own
    continue-as-new hands over state. A raw start has no ``continued_run_id``; a cron or
    retry run has one but repeats its first input, whose ``run_id`` could not name a run
    that did not exist yet; a reset keeps its run's start, so it judges the same."""
    continued = workflow.info().continued_run_id
    if continued is None:
        return ("a carried state is accepted only from the run's own continue-as-new, not "
                "in a new run's input")
    if carry.run_id != continued:
        return (f"a carried state is accepted only from the run's own continue-as-new: this "
                f"run continued from run {continued}, the carry names run {carry.run_id} "
                f"(a cron or retry run repeats its first input)")
    return None


async def origin_refused() -> str | None:
    """Why the run this one continued from (``carry_refused`` passed) is not a run of this
    agent on this task queue (None when it is). Anyone who runs a worker of their own can
    continue-as-new *into* this agent, with a carry naming their own run. The server's
    description of that run, asked by a worker of this queue (an activity: the answer is
    recorded, so a replayer with a queue of its own replays it), says which workflow and
    queue it was. Not a local activity: its marker can land in one workflow task and the
    run's next commands in another, which a replay with an update in between did not get
    through."""
    # In a task (``call_activity``): a carried run takes decisions from its first task.
    refused = await call_activity(
        ORIGIN_ACTIVITY, workflow.info().continued_run_id, result_type=str,
        start_to_close_timeout=timedelta(seconds=30),
        retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10)),
        summary="where this run continued from")
    return refused or None


async def run_origin(client: Client, workflow_id: str, run_id: str) -> tuple[str, str]:
    """The workflow type and task queue the server says run ``run_id`` has; for a run it
    does not know, ("", why). Any other failure to answer raises (the activity is retried).
    Shared by the carry's origin check and the workers' scheduler guard."""
    try:
        described = await client.get_workflow_handle(workflow_id, run_id=run_id).describe()
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise
        return "", f"(no such run: {exc.message})"
    return described.workflow_type, described.task_queue


@activity.defn
async def tower_continued_from(run_id: str) -> str:
    """"" when ``run_id`` (a run of the calling run's workflow id) was the caller's workflow
    type on the caller's task queue (this activity's: ``origin_refused`` schedules it on the
    run's own), else why a carry from it is refused. Every Tower worker registers it
    (TowerPlugin)."""
    info = activity.info()
    was = await run_origin(activity.client(), info.workflow_id or "", run_id)
    if was == (info.workflow_type, info.task_queue):
        return ""
    return (f"a carried state is accepted only from the run's own continue-as-new: run "
            f"{run_id} was workflow {was[0]!r} on task queue {was[1]!r}, this run is "
            f"{info.workflow_type!r} on {info.task_queue!r}")

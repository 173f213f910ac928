"""Gates on Temporal: hold a run for a human decision without holding a worker.

A held run waits on ``workflow.wait_condition`` with the gate's timeout, so it costs
nothing while it waits and any worker resumes it from the history. Decisions arrive
as the ``decide`` update (answers with the outcome) or the ``decision`` signal (fire
and forget). Both go through ``approval.read_decision`` and ``check_decision``: the
update's validator refuses bad decisions before they enter the history; a refused
signal changes nothing and is kept in the audit trail (query ``approvals``). Signals are
taken raw (tower/temporal/_intake.py) and a flood of them is refused cheaply: see
tower/temporal/_refusals.py.

Trust. At start a run loads its tenant's roster (public keys, roles) and policy with
the ``load_trust`` activity. A validator cannot call an activity, so decisions are
checked against the snapshot the run holds, and the run refreshes it while it waits at
a gate: every ``roster_refresh_seconds`` (so a revoked key stops working within that
time), and sooner when asked (the ``refresh_trust`` signal, which carries no authority:
at most one refresh per ``REFRESH_GAP``). Signal-delivered decisions signed by a key
the snapshot does not know yet are kept (a bounded number) and judged again after that
refresh (tower/temporal/_intake.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, ClassVar

from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from tower.contract.decisions import (
    Decision,
    GateRecord,
    GateStatus,
    canonical_proposal,
    legacy_proposal_digest,
    proposal_digest,
)
from tower.contract.notify import GateNotice
from tower.contract.refusals import RefusalCode
from tower.contract.trust import AttestRequest
from tower.core.details import render_details
from tower.core.engine import Transition, advance
from tower.core.errors import NodeFailed
from tower.core.gates import (
    Check,
    Gate,
    Outcome,
    check_decision,
    close_gate,
    open_gate,
    outcome,
    pending_record,
    read_decision,
    record_of,
)
from tower.core.graph import TERMINALS
from tower.core.interpreter import Close, Recheck, decided, moves_on_after_approval, rechecked
from tower.core.state import AgentState, apply_update
from tower.temporal._admission import Admission
from tower.temporal._context import TemporalContext
from tower.temporal._intake import HELD_PAUSE, UNVERIFIED, Intake
from tower.temporal._refusals import CARRY_AFTER_SIGNALS, AuditTrail, TaskBudget
from tower.temporal._task_time import in_a_task

REFUSED = "DecisionRefused"
UNKNOWN_KEY = "DecisionKeyUnknown"
NOTIFY_ATTEMPTS = 5
AUDIT_KEEP = 100  # refused decisions kept in memory (and in the `approvals` query)
# The server lets at most 10 updates into a run at once (history.maxInFlightUpdates), so
# this budget refuses nothing unless a deployment raises that cap well past it.
VALIDATE_PER_TASK = 50  # update validators' signature checks per workflow task
UNVALIDATED = (f"refused unverified: more than {VALIDATE_PER_TASK} decisions arrived in one "
               "workflow task (a flood?); send it again")
REFRESH_GAP = timedelta(seconds=5)  # asked-for roster refreshes: at most one per this
RUN_ID_ACTIVITY = "tower_run_id"
# Edits are judged on the planned state, within the gate's limits (tower/core/gates.py
# ``check_edits``); a request opened before replays judging them as it did.
PLANNED_EDITS_PATCH = "tower-planned-edits"
ATTEST_ACTIVITY = "tower_attest"  # tower/activities/attest.py
# Proposal digests over RFC 8785 canonical JSON; runs recorded before used Python's JSON
# (``1.0``, not ``1``) and keep it, so their recorded decisions are judged as they were.
JCS_PATCH = "tower-jcs-digest"


class Gatekeeper(Intake, Admission):
    """The approval half of ``AgentWorkflow``: handlers, queries and ``hold``."""

    models: ClassVar[list[str]]
    # Continue-as-new while parked at a gate when Temporal suggests it or the run has taken
    # CARRY_AFTER_SIGNALS signals (a flood): the agent's ``carry_input`` must rebuild the run
    # from a Carry.
    carry_while_parked: ClassVar[bool] = False
    _state: AgentState | None
    _log: list[Transition]
    # The runtime's one way to take a step (state, log, search attributes, details).
    _record: Callable[[AgentState, Transition], None]
    _attested: tuple[int, str, str] | None
    publish: Callable[..., None]

    def _init_gates(self) -> None:
        # Decided once, before any handler (a validator may not ask: read-only), and only
        # by gated agents: a run with no gate spends no marker on it.
        self._digest = (legacy_proposal_digest if self.machine.gates
                        and not workflow.patched(JCS_PATCH) else proposal_digest)
        self._init_trust()
        self._init_intake()
        self._refresh_asked = False
        # Signature checks of update validators, apart from the signals' (Intake): refusals.
        # TaskBudget says why; the update handler has none: only updates a validator
        # accepted reach it.
        self._validate_budget = TaskBudget(VALIDATE_PER_TASK, by_time=True)
        self._in_flight: Decision | None = None
        self._legacy_edits = False  # set when a request opens (PLANNED_EDITS_PATCH)
        # Refused decisions (and unknown signals): all counted, the newest kept.
        self._audit = AuditTrail(AUDIT_KEEP)

    @property
    def current(self) -> AgentState:
        assert self._state is not None, "the run has not started"
        return self._state

    async def hold(self, gate: Gate, update: Mapping[str, Any] | None = None,
                   calls: list[str] | None = None, *, resume: bool = False) -> None:
        """Open ``gate`` (or, with ``resume``, go on waiting on the request a run continued
        from left open), wait for a decision or the timeout, and take the route it gives.
        Returns with the request still open when the run should continue-as-new first."""
        assert self._trust is not None  # run_machine refuses a gated run without one
        self._legacy_edits = not workflow.patched(PLANNED_EDITS_PATCH)
        if not resume:
            rule = self._trust.policy.gates.get(gate.name)
            run_id = await self._opening_run_id()
            self._record(*open_gate(
                self.machine, self.current, gate, at=workflow.now(), event_id=_event_id(),
                run_id=run_id, update=update, calls=calls, role=rule.role if rule else None,
                min_review=timedelta(seconds=rule.min_review_seconds if rule else 0)))
        pending = pending_record(self.current)
        if pending is None:  # the update could not be applied: the run failed instead
            return
        self._show_pending(pending)
        await self._attest(pending)
        if not resume:
            self._notify(pending)
        await self._wait_refreshing(gate, pending)
        if self._in_flight is None and workflow.now() < pending.expires_at:
            return  # the history is long (a flood of signals): carry over, still waiting
        try:
            # How the request ends is the interpreter's (tower/core/interpreter.py), as in
            # the in-process runner: here only the re-check's activities are carried out.
            ending = decided(gate, pending, self._in_flight)
            checked: list[str] | None = None  # the calls a re-check made
            if isinstance(ending, Recheck):
                ending, checked = await self._recheck(gate, ending.decision)
            self._close(gate, ending, checked)
            if ending.status == GateStatus.APPROVED and moves_on_after_approval(
                    gate, self.current):
                self._record(*advance(self.machine, self.current, gate.node, {},
                                      at=workflow.now(), event_id=_event_id()))
        finally:
            self._in_flight = None
            self._refuse_held()  # a decision came first, or the request expired

    async def _opening_run_id(self) -> str:
        """The Temporal run id a request opens in, as a recorded step (an activity):
        ``workflow.info().run_id`` would not do, because a reset run replays the requests
        opened before its reset point under its own, new run id, and would then refuse the
        decisions its history shows accepted. Recorded, a request opened before the reset
        point keeps the run id it was opened in, and one opened after names the new run.
        Not a local activity: its marker can land in one workflow task and the gate's
        commands in the next."""
        since = workflow.now()
        run_id: str = await workflow.execute_activity(
            RUN_ID_ACTIVITY, result_type=str, start_to_close_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1),
                                     maximum_interval=timedelta(seconds=10)),
            summary="the run id this request opens in")
        await in_a_task(since)  # the gate opens in a workflow task, never in a query's replay
        return run_id

    async def _attest(self, pending: GateRecord) -> None:
        """Ask the deployment's worker to vouch for this request and publish its answer in
        the memo: listings show only attested requests. A worker with no key answers "";
        one that cannot answer leaves the request unlisted (decidable by run id) — the
        gate waits for its decision all the same."""
        digest = self._digest(pending)
        request = AttestRequest(tenant=self._tenant(), run_id=pending.run_id, gate=pending.gate,
                                step=pending.step, proposal=digest,
                                expires_at=int(pending.expires_at.timestamp()))
        since = workflow.now()
        try:
            token: str = await workflow.execute_activity(
                ATTEST_ACTIVITY, request, result_type=str,
                start_to_close_timeout=timedelta(seconds=10),
                retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=5),
                                         maximum_attempts=3),
                summary=f"attest request · gate {pending.gate}")
        except ActivityError as exc:
            await in_a_task(since)
            workflow.logger.warning("gate %s: request not attested: %s", pending.gate, exc)
            return
        # A decision may come in the same workflow task as the answer: the memo is upserted
        # there, after it, never in an activation a worker ran for a query (task_time.py).
        await in_a_task(since)
        if token:
            self._attested = (pending.step, digest, token)
            self.publish()

    def _notify(self, pending: GateRecord) -> None:
        """Tell the tenant's approvers (its webhook). Not awaited: the wait for a decision
        starts at once, so a flood of signals is taken as it comes (and the run can
        continue-as-new meanwhile); a failure after the retries is only logged."""
        notice = GateNotice(tenant=self._tenant(), run=workflow.info().workflow_id,
                            agent=self.machine.name, gate=pending.gate, role=pending.role,
                            node=pending.node, expires_at=pending.expires_at,
                            proposal=dict(pending.proposal),
                            shown=canonical_proposal(pending))
        sent = workflow.start_activity(
            "notify_gate", notice, start_to_close_timeout=timedelta(seconds=20),
            retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1),
                                     maximum_interval=timedelta(seconds=10),
                                     maximum_attempts=NOTIFY_ATTEMPTS),
            summary=f"notify approvers · gate {pending.gate}")
        sent.add_done_callback(lambda done: _log_unsent(pending.gate, done))

    async def _wait_refreshing(self, gate: Gate, pending: GateRecord) -> None:
        """Wait for a decision until the request expires, re-reading the roster every
        ``roster_refresh_seconds`` and when asked (at most once per ``REFRESH_GAP``)."""
        assert self._trust is not None
        while self._in_flight is None and workflow.now() < pending.expires_at:
            if self._held:  # judged as far as this task's budget goes, the rest in the next
                self._take_held()
                if self._in_flight is None and self._held:
                    await workflow.sleep(HELD_PAUSE)
                continue
            if self._carry_now():
                return
            every = timedelta(seconds=self._trust.policy.roster_refresh_seconds)
            due = self._refreshed_at + (min(every, REFRESH_GAP) if self._refresh_asked
                                        else every)
            if workflow.now() >= due:
                await self._refresh()
                continue
            since = workflow.now()
            try:
                await workflow.wait_condition(
                    self._decided_or_asked(self._refresh_asked),
                    timeout=min(pending.expires_at, due) - workflow.now(),
                    timeout_summary=f"gate {gate.name}: roster refresh or expiry")
            except TimeoutError:  # the timeout is a route, not an error: taken in a task
                await in_a_task(since)

    def _decided_or_asked(self, was_asked: bool) -> Callable[[], bool]:
        return lambda: (self._in_flight is not None or self._refresh_asked != was_asked
                        or bool(self._held) or self._carry_now())

    def _carry_now(self) -> bool:
        """Carry over now: due, and no decision waits for the roster's re-read (it is asked
        for, at most REFRESH_GAP away: a flood after a decision cannot carry it away)."""
        return self.carry_while_parked and self._carry_due() and not self._unknown

    def _carry_due(self) -> bool:
        """Temporal suggests continue-as-new, or a flood of signals nears the server's cap."""
        return (self._signals_taken >= CARRY_AFTER_SIGNALS
                or workflow.info().is_continue_as_new_suggested())

    async def _refresh(self) -> None:
        """Re-read the roster and policy; signalled decisions kept for it are judged again."""
        self._refresh_asked = False
        self._reads_begun += 1  # decisions kept before this read are judged after it
        try:
            self._trust = await self._load_trust()
        except ApplicationError as exc:  # keep the snapshot; say why in the audit trail
            self._audit.add(workflow.now(), "signal", RefusalCode.NOT_JUDGED,
                            f"roster refresh failed: {exc.message}")
            self._refuse_waiting(f"the roster could not be read again ({exc.message})")
            return
        finally:  # when the snapshot in use was read (queries show it)
            self._refreshed_at = workflow.now()
        self._judge_kept()

    async def _recheck(self, gate: Gate, decision: Decision) -> tuple[Close, list[str]]:
        """Run the gate's re-check on the state as approved (edits included): how the
        approval ends, and the calls the re-check made."""
        assert gate.recheck is not None  # decided() asks for a re-check only then
        ctx = TemporalContext(self.machine.name, self.machine.nodes[gate.node],
                              self.current.step, list(self.models), self)
        try:
            stale = await gate.recheck(ctx, apply_update(self.current, decision.edits))
        except (NodeFailed, ActivityError) as exc:
            return rechecked(gate, decision, failed=str(exc)), ctx.calls
        return rechecked(gate, decision, stale=stale), ctx.calls

    def _close(self, gate: Gate, ending: Close, calls: list[str] | None = None) -> None:
        self._record(*close_gate(self.machine, self.current, gate, ending.status,
                                 target=ending.target, at=workflow.now(), event_id=_event_id(),
                                 decision=ending.decision, why=ending.why,
                                 update=ending.update, calls=calls))

    # --- decisions -------------------------------------------------------------------------

    def _judge(self, raw: Any, *, budget: TaskBudget | None = None,
               ) -> tuple[Decision | None, Check]:
        """``budget``: the signature checks this one counts against, if not counted yet."""
        if self._state is None:  # not started: no roster read yet, nothing pending
            return None, Check(False, "the run is not awaiting a decision: it has not "
                                      "started yet", code=RefusalCode.NOT_PENDING)
        assert self._trust is not None  # run_machine refuses a gated run without one
        if budget is not None and not budget.take():
            return None, Check(False, UNVALIDATED if budget is self._validate_budget
                               else UNVERIFIED, code=RefusalCode.OVERLOADED)
        decision, read = read_decision(raw, trust=self._trust, now=workflow.now())
        if decision is None:
            return None, read
        return decision, check_decision(
            decision, state=self._state, gates={g.name: g for g in self.machine.gates.values()},
            tenant=self._tenant(), run=workflow.info().workflow_id, now=workflow.now(),
            in_flight=self._in_flight, legacy_edits=self._legacy_edits, digest=self._digest)

    def _tenant(self) -> str:
        if self._trust is not None:
            return self._trust.roster.tenant
        return workflow.info().namespace

    # Bare decorator: the update is still named after the method, and temporalio's
    # async overload types execute_update's result (with name=, mypy sees a coroutine).
    @workflow.update
    async def decide(self, raw: dict[str, Any]) -> Outcome:
        """A decision as an update: answers with the outcome the run reported."""
        # Checked again here: on replay the validator does not run, and a decision
        # accepted in the same workflow task may have decided the gate meanwhile. No
        # budget: the validator accepted it, and the handler must judge alike on replay.
        decision, check = self._judge(raw)
        if decision is None or not check.ok:
            code = check.code or RefusalCode.MALFORMED
            self._audit.add(workflow.now(), "update", code, check.reason, raw)
            # The code rides in the error's details: clients read it, never the words.
            raise ApplicationError(check.reason, code.value, type=REFUSED, non_retryable=True)
        if not check.duplicate:
            self._in_flight = decision
        decision_id = decision.decision_id
        await workflow.wait_condition(lambda: self._settled(decision_id))
        return self._outcome(decision, check.duplicate)

    @decide.validator
    def _validate_decide(self, raw: dict[str, Any]) -> None:
        _, check = self._judge(raw, budget=self._validate_budget)
        if not check.ok:
            # Its own type for a key the run's roster does not have yet: the sender may ask
            # the run to re-read its roster and send again (validator only: not in history).
            kind = UNKNOWN_KEY if check.unknown_key else REFUSED
            code = check.code or RefusalCode.MALFORMED
            raise ApplicationError(check.reason, code.value, type=kind, non_retryable=True)

    def _settled(self, decision_id: str) -> bool:
        record = record_of(self.current, decision_id)
        return (record is not None and record.status != GateStatus.PENDING) or (
            self.current.node in TERMINALS and self._in_flight is None)

    def _outcome(self, decision: Decision, duplicate: bool) -> Outcome:
        record = record_of(self.current, decision.decision_id)
        if record is None:
            return Outcome(decision_id=decision.decision_id, gate=decision.gate,
                           result=GateStatus.PENDING, node=self.current.node,
                           status=self.current.status.value, step=self.current.step,
                           reason="the run ended before the decision was applied")
        return outcome(record, decision.decision_id, self.current, duplicate)

    @workflow.query(name="approvals")
    def query_approvals(self) -> dict[str, Any]:
        """The pending request, every request so far, and the refused decisions."""
        state = self._state
        pending = pending_record(state)
        return {
            "tenant": self._tenant(),
            "run": workflow.info().workflow_id,
            "agent": self.machine.name,
            "unsigned_allowed": self._trust.policy.unsigned_allowed if self._trust else False,
            "trust": "roster" if self._trust else None,
            "roster_digest": self._trust.digest if self._trust else None,
            "refreshed_at": (self._refreshed_at.isoformat() if self._refreshed_at else None),
            "pending": pending.model_dump(mode="json") if pending else None,
            # The digest this run judges decisions by (a run recorded before RFC 8785 keeps
            # the legacy form): a client checks it against its own (client/_decisions.py).
            "proposal_digest": self._digest(pending) if pending else None,
            "records": [r.model_dump(mode="json") for r in (state.approvals if state else [])],
            "refused": [r.model_dump(mode="json") for r in self._audit.refusals()],
            "refused_total": self._audit.total,
            # Signalled decisions not judged yet: past a task's budget, or waiting for the
            # roster's re-read (signed by a key the snapshot does not name).
            "held": len(self._held),
            "waiting_for_roster": len(self._unknown),
        }

    def _show_pending(self, pending: GateRecord) -> None:
        # The same story as at every step, now with the request: gate, role, proposal.
        del pending  # render_details finds it in the state
        workflow.set_current_details(render_details(
            self.machine, self.current, self._log[-1] if self._log else None,
            workflow.info().workflow_id))


@activity.defn(name=RUN_ID_ACTIVITY)
async def current_run_id() -> str:
    """The run id of the workflow run that calls it (``Gatekeeper._opening_run_id``);
    every worker hosting gated agents registers it (tower/temporal/worker.py)."""
    run_id = activity.info().workflow_run_id
    assert run_id is not None, "called outside a workflow run"
    return run_id


def _log_unsent(gate: str, done: Any) -> None:
    if not done.cancelled() and done.exception() is not None:
        workflow.logger.warning("gate %s: approvers not notified: %s", gate, done.exception())


def _event_id() -> int:
    return workflow.info().get_current_history_length()

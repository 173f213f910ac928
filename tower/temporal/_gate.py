"""Gates on Temporal: hold a run for a human decision without holding a worker.

``GateRuntime`` is the gate as one object a gated run holds: its state (the decision in
flight), its intake of signals (tower/temporal/_intake.py), its judge and its refusals
(the audit trail, query ``approvals``). It asks the run only what
``GatedRun`` names. A held run waits on ``workflow.wait_condition`` with the gate's
timeout, so it costs nothing while it waits and any worker resumes it from the history.
Decisions arrive as the ``decide`` update (its validator refuses bad ones before they
enter the history) or the ``decision`` signal; both are judged by ``read_decision`` and
``check_decision`` against the run's roster snapshot (tower/temporal/_admission.py), which
the run re-reads while it waits: every ``roster_refresh_seconds`` (so a revoked key stops
working within that time), and when asked (the ``refresh_trust`` signal, which carries no
authority: at most one refresh per ``REFRESH_GAP``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, ClassVar, Protocol

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

from tower.contract.decisions import (
    Decision,
    GateRecord,
    GateStatus,
    canonical_proposal,
    proposal_digest,
)
from tower.contract.notify import GateNotice
from tower.contract.refusals import RefusalCode
from tower.contract.trust import AttestRequest, TrustSnapshot
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
from tower.core.graph import TERMINALS, Machine
from tower.core.interpreter import Close, Recheck, decided, moves_on_after_approval, rechecked
from tower.core.state import AgentState, apply_update
from tower.temporal._context import TemporalContext
from tower.temporal._gate_calls import attestation, notify, opening_run_id
from tower.temporal._intake import HELD_PAUSE, UNVERIFIED, Intake
from tower.temporal._machine_run import event_id
from tower.temporal._refusals import CARRY_AFTER_SIGNALS, AuditTrail, TaskBudget
from tower.temporal._task_time import in_a_task

REFUSED = "DecisionRefused"
UNKNOWN_KEY = "DecisionKeyUnknown"
AUDIT_KEEP = 100  # refused decisions kept in memory (and in the `approvals` query)
# The server lets at most 10 updates into a run at once (history.maxInFlightUpdates), so
# this budget refuses nothing unless a deployment raises that cap well past it.
VALIDATE_PER_TASK = 50  # update validators' signature checks per workflow task
UNVALIDATED = (f"refused unverified: more than {VALIDATE_PER_TASK} decisions arrived in one "
               "workflow task (a flood?); send it again")
REFRESH_GAP = timedelta(seconds=5)  # asked-for roster refreshes: at most one per this


class GatedRun(Protocol):
    """What a gate asks of the run that holds it (``AgentWorkflow``), and nothing more."""

    machine: ClassVar[Machine]
    models: ClassVar[list[str]]
    carry_while_parked: ClassVar[bool]  # continue-as-new while parked (``_carry_now``)
    _state: AgentState | None  # None until the run starts
    _trust: TrustSnapshot | None  # the roster and policy decisions are judged by
    _refreshed_at: Any  # when that snapshot was read

    @property
    def current(self) -> AgentState: ...  # the state, once the run has started

    def _record(self, state: AgentState, transition: Transition) -> None: ...  # a step
    def _show_details(self) -> None: ...  # the Web UI's current details, request included
    def _attest_memo(self, step: int, digest: str, token: str) -> None: ...  # into the memo
    async def _load_trust(self) -> TrustSnapshot: ...  # raises ApplicationError if it cannot


class GateRuntime:
    """A gated run's gate: ``hold`` a request open, take decisions, judge them."""

    def __init__(self, run: GatedRun) -> None:
        self.run = run
        self.refresh_asked = False
        # Signature checks of update validators per task (refusals.TaskBudget says why);
        # the update handler has none: only updates a validator accepted reach it.
        self._validate_budget = TaskBudget(VALIDATE_PER_TASK, by_time=True)
        self.in_flight: Decision | None = None
        # Refused decisions (and unknown signals): all counted, the newest kept.
        self.audit = AuditTrail(AUDIT_KEEP)
        self.intake = Intake(self)

    async def hold(self, gate: Gate, update: Mapping[str, Any] | None = None,
                   calls: list[str] | None = None, *, resume: bool = False) -> None:
        """Open ``gate`` (or, with ``resume``, go on waiting on the request a run continued
        from left open), wait for a decision or the timeout, and take the route it gives.
        Returns with the request still open when the run should continue-as-new first."""
        run, trust = self.run, self.run._trust
        assert trust is not None  # run_machine refuses a gated run without one
        if not resume:
            rule = trust.policy.gates.get(gate.name)
            run_id = await opening_run_id()
            run._record(*open_gate(
                run.machine, self.run.current, gate, at=workflow.now(), event_id=event_id(),
                run_id=run_id, update=update, calls=calls, role=rule.role if rule else None,
                min_review=timedelta(seconds=rule.min_review_seconds if rule else 0)))
        pending = pending_record(self.run.current)
        if pending is None:  # the update could not be applied: the run failed instead
            return
        run._show_details()  # the same story as at every step, now with the request
        digest = proposal_digest(pending)
        token = await attestation(AttestRequest(
            tenant=self.tenant(), run_id=pending.run_id, gate=pending.gate, step=pending.step,
            proposal=digest, expires_at=int(pending.expires_at.timestamp())))
        if token:  # listings show only attested requests
            run._attest_memo(pending.step, digest, token)
        if not resume:
            notify(GateNotice(tenant=self.tenant(), run=workflow.info().workflow_id,
                              agent=run.machine.name, gate=pending.gate, role=pending.role,
                              node=pending.node, expires_at=pending.expires_at,
                              proposal=dict(pending.proposal),
                              shown=canonical_proposal(pending)))
        await self._wait_refreshing(gate, pending)
        if self.in_flight is None and workflow.now() < pending.expires_at:
            return  # the history is long (a flood of signals): carry over, still waiting
        try:
            # How the request ends is the interpreter's (tower/core/interpreter.py), as in
            # the in-process runner: here only the re-check's activities are carried out.
            ending = decided(gate, pending, self.in_flight)
            checked: list[str] | None = None  # the calls a re-check made
            if isinstance(ending, Recheck):
                ending, checked = await self._recheck(gate, ending.decision)
            run._record(*close_gate(
                run.machine, self.run.current, gate, ending.status, target=ending.target,
                at=workflow.now(), event_id=event_id(), decision=ending.decision,
                why=ending.why, update=ending.update, calls=checked))
            if ending.status == GateStatus.APPROVED and moves_on_after_approval(
                    gate, self.run.current):
                run._record(*advance(run.machine, self.run.current, gate.node, {},
                                     at=workflow.now(), event_id=event_id()))
        finally:
            self.in_flight = None
            self.intake.refuse_held()  # a decision came first, or the request expired

    async def _wait_refreshing(self, gate: Gate, pending: GateRecord) -> None:
        """Wait for a decision until the request expires, re-reading the roster every
        ``roster_refresh_seconds`` and when asked (at most once per ``REFRESH_GAP``)."""
        intake = self.intake
        while self.in_flight is None and workflow.now() < pending.expires_at:
            if intake.held:  # judged as far as this task's budget goes, the rest in the next
                intake.take_held()
                if self.in_flight is None and intake.held:
                    await workflow.sleep(HELD_PAUSE)
                continue
            if self._carry_now():
                return
            assert self.run._trust is not None
            every = timedelta(seconds=self.run._trust.policy.roster_refresh_seconds)
            due = self.run._refreshed_at + (min(every, REFRESH_GAP) if self.refresh_asked
                                            else every)
            if workflow.now() >= due:
                await self._refresh()
                continue
            since = workflow.now()
            try:
                await workflow.wait_condition(
                    self._decided_or_asked(self.refresh_asked),
                    timeout=min(pending.expires_at, due) - workflow.now(),
                    timeout_summary=f"gate {gate.name}: roster refresh or expiry")
            except TimeoutError:  # the timeout is a route, not an error: taken in a task
                await in_a_task(since)

    def _decided_or_asked(self, was_asked: bool) -> Callable[[], bool]:
        return lambda: (self.in_flight is not None or self.refresh_asked != was_asked
                        or bool(self.intake.held) or self._carry_now())

    def flooded(self) -> bool:
        """The run has taken so many signals it should carry over (the server caps them)."""
        return self.intake.signals_taken >= CARRY_AFTER_SIGNALS

    def _carry_now(self) -> bool:
        """Carry over now: the agent carries while parked, Temporal suggests it or a flood
        nears the server's cap, and no decision waits for the roster's re-read (it is asked
        for, at most REFRESH_GAP away: a flood after a decision cannot carry it away)."""
        return (self.run.carry_while_parked and (
            self.flooded() or workflow.info().is_continue_as_new_suggested())
            and not self.intake.unknown)

    async def _refresh(self) -> None:
        """Re-read the roster and policy; signalled decisions kept for it are judged again."""
        self.refresh_asked = False
        self.intake.reads_begun += 1  # decisions kept before this read are judged after it
        try:
            self.run._trust = await self.run._load_trust()
        except ApplicationError as exc:  # keep the snapshot; say why in the audit trail
            self.audit.add(workflow.now(), "signal", RefusalCode.NOT_JUDGED,
                           f"roster refresh failed: {exc.message}")
            self.intake.refuse_waiting(f"the roster could not be read again ({exc.message})")
            return
        finally:  # when the snapshot in use was read (queries show it)
            self.run._refreshed_at = workflow.now()
        self.intake.judge_kept()

    async def _recheck(self, gate: Gate, decision: Decision) -> tuple[Close, list[str]]:
        """Run the gate's re-check on the state as approved (edits included): how the
        approval ends, and the calls the re-check made."""
        assert gate.recheck is not None  # decided() asks for a re-check only then
        machine = self.run.machine
        ctx = TemporalContext(machine.name, machine.nodes[gate.node], self.run.current.step,
                              list(self.run.models), self.run)
        try:
            stale = await gate.recheck(ctx, apply_update(self.run.current, decision.edits))
        except (NodeFailed, ActivityError) as exc:
            return rechecked(gate, decision, failed=str(exc)), ctx.calls
        return rechecked(gate, decision, stale=stale), ctx.calls

    # --- decisions -------------------------------------------------------------------------

    def judge(self, raw: Any, *, budget: TaskBudget | None = None,
              ) -> tuple[Decision | None, Check]:
        """``budget``: the signature checks this one counts against, if not counted yet."""
        state, trust = self.run._state, self.run._trust
        if state is None:  # not started: no roster read yet, nothing pending
            return None, Check(False, "the run is not awaiting a decision: it has not "
                                      "started yet", code=RefusalCode.NOT_PENDING)
        assert trust is not None  # run_machine refuses a gated run without one
        if budget is not None and not budget.take():
            return None, Check(False, UNVALIDATED if budget is self._validate_budget
                               else UNVERIFIED, code=RefusalCode.OVERLOADED)
        decision, read = read_decision(raw, trust=trust, now=workflow.now())
        if decision is None:
            return None, read
        return decision, check_decision(
            decision, state=state, gates={g.name: g for g in self.run.machine.gates.values()},
            tenant=self.tenant(), now=workflow.now(),
            in_flight=self.in_flight)

    def tenant(self) -> str:
        trust = self.run._trust
        return trust.roster.tenant if trust is not None else workflow.info().namespace

    async def decide(self, raw: dict[str, Any]) -> Outcome:
        """The ``decide`` update: answers with the outcome the run reported."""
        # Checked again here: on replay the validator does not run, and a decision
        # accepted in the same workflow task may have decided the gate meanwhile. No
        # budget: the validator accepted it, and the handler must judge alike on replay.
        decision, check = self.judge(raw)
        if decision is None or not check.ok:
            code = check.code or RefusalCode.MALFORMED
            self.audit.add(workflow.now(), "update", code, check.reason, raw)
            # The code rides in the error's details: clients read it, never the words.
            raise ApplicationError(check.reason, code.value, type=REFUSED, non_retryable=True)
        if not check.duplicate:
            self.in_flight = decision
        decision_id = decision.decision_id
        await workflow.wait_condition(lambda: self._settled(decision_id))
        record = record_of(self.run.current, decision_id)
        if record is None:
            return Outcome(decision_id=decision_id, gate=decision.gate,
                           result=GateStatus.PENDING, node=self.run.current.node,
                           status=self.run.current.status.value, step=self.run.current.step,
                           reason="the run ended before the decision was applied")
        return outcome(record, decision_id, self.run.current, check.duplicate)

    def validate(self, raw: dict[str, Any]) -> None:
        """The ``decide`` update's validator: refuses before the history holds it."""
        _, check = self.judge(raw, budget=self._validate_budget)
        if not check.ok:
            # Its own type for a key the run's roster does not have yet: the sender may ask
            # the run to re-read its roster and send again (validator only: not in history).
            kind = UNKNOWN_KEY if check.unknown_key else REFUSED
            code = check.code or RefusalCode.MALFORMED
            raise ApplicationError(check.reason, code.value, type=kind, non_retryable=True)

    def _settled(self, decision_id: str) -> bool:
        record = record_of(self.run.current, decision_id)
        return (record is not None and record.status != GateStatus.PENDING) or (
            self.run.current.node in TERMINALS and self.in_flight is None)

    def approvals(self) -> dict[str, Any]:
        """The ``approvals`` query: the pending request, every request so far, and the
        refused decisions."""
        state, trust, refreshed = self.run._state, self.run._trust, self.run._refreshed_at
        pending = pending_record(state)
        return {
            "tenant": self.tenant(),
            "run": workflow.info().workflow_id,
            "agent": self.run.machine.name,
            "unsigned_allowed": trust.policy.unsigned_allowed if trust else False,
            "trust": "roster" if trust else None,
            "roster_digest": trust.digest if trust else None,
            "refreshed_at": refreshed.isoformat() if refreshed else None,
            "pending": pending.model_dump(mode="json") if pending else None,
            # What an approver decides, the object the digest is over (docs/approvals.md).
            "shown": canonical_proposal(pending) if pending else None,
            "proposal_digest": proposal_digest(pending) if pending else None,
            "records": [r.model_dump(mode="json") for r in (state.approvals if state else [])],
            "refused": [r.model_dump(mode="json") for r in self.audit.refusals()],
            "refused_total": self.audit.total,
            # Signalled decisions not judged yet: past a task's budget, or waiting for the
            # roster's re-read (signed by a key the snapshot does not name).
            "held": len(self.intake.held),
            "waiting_for_roster": len(self.intake.unknown),
        }

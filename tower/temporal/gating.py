"""Gates on Temporal: hold a run for a human decision without holding a worker.

A held run waits on ``workflow.wait_condition`` with the gate's timeout, so it costs
nothing while it waits and any worker resumes it from the history. Decisions arrive
as the ``decision`` signal (fire and forget) or the ``decide`` update (answers with
the outcome). Both go through ``approval.check_decision``: the update's validator
refuses bad decisions before they enter the history; a refused signal changes nothing
and is kept in the audit trail (query ``approvals``) with the reason.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, ClassVar

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from tower.contract import search
from tower.contract.decisions import Decision, GateRecord, GateStatus, Verdict
from tower.contract.notify import GateNotice
from tower.core.approval import (
    ApprovalSettings,
    Check,
    Gate,
    Outcome,
    Refusal,
    canonical_time,
    check_decision,
    outcome,
    pending_record,
    record_of,
)
from tower.core.details import render_details
from tower.core.engine import Transition, advance
from tower.core.errors import NodeFailed
from tower.core.gates import close_gate, open_gate
from tower.core.graph import FAILED, TERMINALS, Machine
from tower.core.state import AgentState, Message, apply_update
from tower.temporal.context import NodeContext

REFUSED = "DecisionRefused"
# Runs recorded before gates notified approvers (webhook) replay without the activity.
NOTIFY_PATCH = "tower-gate-notify"
NOTIFY_ATTEMPTS = 5
AUDIT_KEEP = 100  # refused decisions kept in memory (and in the `approvals` query)


class Gatekeeper:
    """The approval half of ``AgentWorkflow``: handlers, queries and ``hold``."""

    machine: ClassVar[Machine]
    models: ClassVar[list[str]]
    _state: AgentState | None
    _log: list[Transition]

    def _init_gates(self) -> None:
        self._approval = ApprovalSettings()
        self._in_flight: Decision | None = None
        self._audit: list[Refusal] = []
        self._refused_total = 0

    @property
    def current(self) -> AgentState:  # provided by AgentWorkflow
        raise NotImplementedError

    def _record(self, state: AgentState, transition: Transition) -> None:
        raise NotImplementedError

    def _use_approval_settings(self, settings: ApprovalSettings | None) -> None:
        self._approval = settings or ApprovalSettings()
        namespace = workflow.info().namespace
        tenant = self._approval.tenant
        if tenant and tenant != namespace and not workflow.unsafe.is_replaying():
            raise ApplicationError(
                f"the run's approval settings are for tenant {tenant!r} but the run is in "
                f"namespace {namespace!r}", type="WrongTenant", non_retryable=True)
        if self.machine.gates and self._approval.key is None and not self._approval.allow_unsigned:
            # Without a key no decision could ever be accepted: refuse to start.
            raise ApplicationError(
                f"agent {self.machine.name!r} has approval gates but the run was started "
                "without an approval key: start it with `tower run` (which derives one from "
                "TOWER_APPROVAL_SECRET) or set approvals.allow_unsigned for a dev deployment",
                type="MissingApprovalKey", non_retryable=True)

    async def hold(self, gate: Gate, update: Mapping[str, Any] | None = None,
                   calls: list[str] | None = None) -> None:
        """Open ``gate``, wait for a decision or the timeout, and take the route it gives."""
        self._record(*open_gate(self.machine, self.current, gate, at=workflow.now(),
                                event_id=_event_id(), update=update, calls=calls))
        pending = pending_record(self.current)
        if pending is None:  # the update could not be applied: the run failed instead
            return
        self._show_pending(pending)
        if workflow.patched(NOTIFY_PATCH):
            await self._notify(pending)  # decisions may arrive meanwhile: they are kept
        with contextlib.suppress(TimeoutError):  # the timeout is a route, not an error
            await workflow.wait_condition(
                lambda: self._in_flight is not None, timeout=pending.expires_at - workflow.now(),
                timeout_summary=f"gate {gate.name} expires")
        decision = self._in_flight
        try:
            if decision is None:
                self._close(gate, GateStatus.EXPIRED, gate.on_timeout,
                            why=f"no decision by {canonical_time(pending.expires_at)}")
            elif decision.decision == Verdict.REJECT:
                self._close(gate, GateStatus.REJECTED, gate.on_reject, decision)
            else:
                await self._approve(gate, decision)
        finally:
            self._in_flight = None

    async def _notify(self, pending: GateRecord) -> None:
        """Tell the tenant's approvers (its webhook); a failure only gets logged."""
        notice = GateNotice(tenant=self._tenant(), run=workflow.info().workflow_id,
                            agent=self.machine.name, gate=pending.gate, role=pending.role,
                            node=pending.node, expires_at=pending.expires_at,
                            proposal={k: str(v)[:search.MEMO_VALUE_CHARS]
                                      for k, v in pending.proposal.items()})
        try:
            await workflow.execute_activity(
                "notify_gate", notice, start_to_close_timeout=timedelta(seconds=20),
                retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1),
                                         maximum_interval=timedelta(seconds=10),
                                         maximum_attempts=NOTIFY_ATTEMPTS),
                summary=f"notify approvers · gate {pending.gate}")
        except ActivityError as exc:
            workflow.logger.warning("gate %s: approvers not notified: %s", pending.gate,
                                    exc.cause or exc)

    async def _approve(self, gate: Gate, decision: Decision) -> None:
        ctx = NodeContext(self.machine.name, self.machine.nodes[gate.node], self.current.step,
                          list(self.models))
        if gate.recheck is not None:
            try:
                # The re-check sees the state as approved, edits included.
                stale = await gate.recheck(ctx, apply_update(self.current, decision.edits))
            except (NodeFailed, ActivityError) as exc:
                why = f"re-check failed: {exc}"
                self._close(gate, GateStatus.APPROVED, FAILED, decision, why=why,
                            update={"errors": [why]}, calls=ctx.calls)
                return
            if stale:
                assert gate.on_stale is not None
                note = Message(role="system", content=f"The approved action was not carried "
                               f"out because the world changed: {stale}. Plan again.")
                self._close(gate, GateStatus.STALE, gate.on_stale, decision, why=stale,
                            update={"messages": [note]}, calls=ctx.calls)
                return
        self._close(gate, GateStatus.APPROVED, gate.node, decision, update=decision.edits,
                    calls=ctx.calls)
        if gate.when == "after" and self.current.node == gate.node:
            self._record(*advance(self.machine, self.current, gate.node, {},
                                  at=workflow.now(), event_id=_event_id()))

    def _close(self, gate: Gate, status: GateStatus, target: str,
               decision: Decision | None = None, *, why: str = "",
               update: Mapping[str, Any] | None = None, calls: list[str] | None = None) -> None:
        self._record(*close_gate(self.machine, self.current, gate, status, target=target,
                                 at=workflow.now(), event_id=_event_id(), decision=decision,
                                 why=why, update=update, calls=calls))

    # --- decisions -------------------------------------------------------------------------

    def _judge(self, raw: Any) -> tuple[Decision | None, Check]:
        try:
            decision = Decision.model_validate(raw)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}"
                                 for e in exc.errors()[:5])
            return None, Check(False, f"malformed decision: {problems}")
        info = workflow.info()
        return decision, check_decision(
            decision, state=self._state, gates={g.name: g for g in self.machine.gates.values()},
            tenant=self._tenant(), run=info.workflow_id, now=workflow.now(),
            settings=self._approval, in_flight=self._in_flight)

    def _remember(self, refusal: Refusal) -> None:
        # Keep the newest refusals only: a flood of bad signals must not grow the run's
        # memory without bound (every one of them is in the history anyway).
        self._refused_total += 1
        self._audit = [*self._audit[-(AUDIT_KEEP - 1):], refusal]

    def _tenant(self) -> str:
        return self._approval.tenant or workflow.info().namespace

    def _refusal(self, raw: Any, via: str, reason: str) -> Refusal:
        fields = raw if isinstance(raw, dict) else {}
        return Refusal(at=workflow.now(), via=via, reason=reason,  # type: ignore[arg-type]
                       **{k: str(fields.get(k, ""))[:200]
                          for k in ("decision_id", "gate", "approver", "decision")})

    @workflow.signal(name="decision")
    def on_decision(self, raw: dict[str, Any]) -> None:
        """A decision as a signal. Refused ones change nothing and go to the audit trail."""
        decision, check = self._judge(raw)
        if not check.ok or check.duplicate:
            reason = check.reason or "duplicate of an accepted decision: nothing changed"
            self._remember(self._refusal(raw, "signal", reason))
            return
        self._in_flight = decision

    # Bare decorator: the update is still named after the method, and temporalio's
    # async overload types execute_update's result (with name=, mypy sees a coroutine).
    @workflow.update
    async def decide(self, raw: dict[str, Any]) -> Outcome:
        """A decision as an update: answers with the outcome the run reported."""
        # Checked again here: on replay the validator does not run, and a decision
        # accepted in the same workflow task may have decided the gate meanwhile.
        decision, check = self._judge(raw)
        if decision is None or not check.ok:
            self._remember(self._refusal(raw, "update", check.reason))
            raise ApplicationError(check.reason, type=REFUSED, non_retryable=True)
        if not check.duplicate:
            self._in_flight = decision
        decision_id = decision.decision_id
        await workflow.wait_condition(lambda: self._settled(decision_id))
        return self._outcome(decision, check.duplicate)

    @decide.validator
    def _validate_decide(self, raw: dict[str, Any]) -> None:
        _, check = self._judge(raw)
        if not check.ok:
            raise ApplicationError(check.reason, type=REFUSED, non_retryable=True)

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
            "unsigned_allowed": self._approval.allow_unsigned,
            "pending": pending.model_dump(mode="json") if pending else None,
            "records": [r.model_dump(mode="json") for r in (state.approvals if state else [])],
            "refused": [r.model_dump(mode="json") for r in self._audit],
            "refused_total": self._refused_total,
        }

    def _show_pending(self, pending: GateRecord) -> None:
        # The same story as at every step, now with the request: gate, role, proposal.
        del pending  # render_details finds it in the state
        workflow.set_current_details(render_details(
            self.machine, self.current, self._log[-1] if self._log else None,
            workflow.info().workflow_id))


def _event_id() -> int:
    return workflow.info().get_current_history_length()

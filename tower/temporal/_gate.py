"""Gates on Temporal: hold a run for a human decision without holding a worker.

``GateRuntime`` is a gated run's one gate object: it owns the roster snapshot decisions are
judged by (``Trust``, which only the gate re-reads), the decision in flight, the intake of
signals and its budgets, the attestation of the open request and the audit trail of
refusals (query ``approvals``). The rules a decision must pass are pure
(tower/core/gates.py). A held run waits on ``workflow.wait_condition``: it costs nothing
while it waits and any worker resumes it from the history. Decisions arrive as the
``decide`` update (its validator refuses bad ones before they enter the history) or the
``decision`` signal. A request is published (search attributes, memo, this query) only
once the worker's attestation of it is back, so no reader sees a genuine request
unattested. The roster is re-read while the run waits, and how a flood of signals is
survived is docs/approvals.md's ("A flood"); the constants below say the bounds.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from temporalio import activity, workflow
from temporalio.common import RawValue, RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from tower.contract.decisions import (
    Decision,
    GateRecord,
    GateStatus,
    canonical_proposal,
    proposal_digest,
)
from tower.contract.failures import Code, DecisionRefused, failure
from tower.contract.notify import GateNotice
from tower.contract.pending import PendingView
from tower.contract.trust import ATTEST_ACTIVITY, AttestRequest, TrustSnapshot
from tower.core.gates import (
    Check,
    Gate,
    Outcome,
    Refusal,
    check_decision,
    outcome,
    pending_record,
    pending_view,
    read_decision,
    record_of,
)
from tower.core.graph import TERMINALS
from tower.core.state import AgentState
from tower.temporal import _stream_sink as stream_sink
from tower.temporal._task_time import TaskBudget, call_activity, in_a_task
from tower.temporal.payloads import UnopenablePayload

if TYPE_CHECKING:
    from tower.temporal._runtime import AgentWorkflow

AUDIT_KEEP = 100  # refused decisions kept in memory (and in the `approvals` query)
Via = Literal["signal", "update"]
Kept = dict[str, str] | Sequence[RawValue] | None  # what a kept refusal shows, or its inputs
KEEP_BYTES = 16 * 1024  # a kept raw input larger than this is remembered by its size only
FIELDS = ("decision_id", "gate", "approver", "decision")
FIELD_CHARS = 200
# Tower's servers take at most this many signals per run (history.maximumSignalsPerExecution:
# deploy/temporal/dynamicconfig.yaml, the dev server), so one task holds at most this many,
# well within the SDK's 2 s deadlock detector (docs/approvals.md).
MAX_SIGNALS_PER_RUN = 1_000
# A parked run carries over once it has taken this many, before the server's cap is reached.
CARRY_AFTER_SIGNALS = MAX_SIGNALS_PER_RUN // 2
# Signature checks per workflow task (TaskBudget): of update validators (the server
# lets at most 10 updates in at once, so this refuses nothing unless that cap is raised),
# and of signals. The update handler has none: only updates a validator accepted reach it.
VALIDATE_PER_TASK = 50
VERIFY_PER_TASK = 50
UNVALIDATED = (f"refused unverified: more than {VALIDATE_PER_TASK} decisions arrived in one "
               "workflow task (a flood?); send it again")
UNVERIFIED = (f"refused unverified: more than {VERIFY_PER_TASK} decisions arrived in one "
              "workflow task (a flood?); send it again, as the decide update")
# Decide updates a run lets wait for a roster re-read: each is in its history (and counts
# against the server's updates per run), so a flood of forged key ids cannot grow either.
ROSTER_RECHECKS = 20
REFRESH_GAP = timedelta(seconds=5)  # asked-for roster refreshes: at most one per this
# Signalled decisions past a task's budget are held and judged, in order, in the tasks that
# follow (a short timer makes each); with no request to decide, refused at once, UNVERIFIED.
HELD_PAUSE = timedelta(milliseconds=10)
HELD_UNJUDGED = "the request closed before this decision was judged (a flood?): nothing changed"
UNKNOWN_KEEP = 100  # signalled decisions under unknown key ids waiting for a roster read
UNKNOWN_FULL = (f"; not kept for the run's next roster read: {UNKNOWN_KEEP} decisions under "
                "unknown keys wait for it already (a flood?); send it again once the run has "
                "re-read its roster, or as the decide update")
UNKNOWN_UNJUDGED = "signed by a key the run's roster did not name"
NOTIFY_ATTEMPTS = 5
RUN_ID_ACTIVITY = "tower_run_id"


def decoded(args: Sequence[RawValue]) -> tuple[dict[str, Any] | None, str]:
    """The JSON object a decision signal carries, or why it carries none."""
    if len(args) != 1:
        return None, (f"malformed decision: a decision signal carries one JSON object, "
                      f"this one carried {len(args)} inputs")
    try:
        value = workflow.payload_converter().from_payload(args[0].payload, dict[str, Any])
    except UnopenablePayload as exc:
        return None, f"malformed decision: {exc}"
    except Exception:  # whatever the converter raises on input a sender chose
        value = None
    if not isinstance(value, dict):
        return None, "malformed decision: the signal's input is not a JSON object"
    return value, ""


def brief(raw: Any) -> dict[str, str]:
    """What a refusal shows of its input: only what the run can read without trusting it,
    each field cut short; a token is named by its size."""
    if not isinstance(raw, Mapping):
        return {}
    if "token" in raw:
        return {"decision_id": f"token ({len(str(raw['token']))} chars)"}
    return {k: str(raw.get(k, ""))[:FIELD_CHARS] for k in FIELDS}


class AuditTrail:
    """Every refusal counted (``total``), the newest ``keep`` shown by ``refusals()``."""

    def __init__(self, keep: int) -> None:
        self.total = 0
        self._kept: deque[tuple[datetime, Via, Code, str, Kept]] = deque(maxlen=keep)

    def add(self, code: Code, reason: str, raw: Any = None, *, via: Via = "signal",
            at: datetime | None = None) -> None:
        """Refuse an input: decoded (a dict: only its small part is kept), or a signal's
        inputs as they came, decoded only if shown and kept only if small (a flood of large
        inputs must not be held in memory)."""
        self.total += 1
        if raw is None or isinstance(raw, Mapping):
            kept: Kept = brief(raw)
        else:
            kept = raw if len(raw) == 1 and raw[0].payload.ByteSize() <= KEEP_BYTES else None
        self._kept.append((at or workflow.now(), via, code, reason, kept))

    def refusals(self) -> list[Refusal]:
        return [Refusal(at=at, via=via, code=code, reason=reason, **self._fields(raw))
                for at, via, code, reason, raw in self._kept]

    @staticmethod
    def _fields(raw: Kept) -> dict[str, str]:
        if raw is None or isinstance(raw, dict):
            return dict(raw or {})
        value, _ = decoded(raw)
        return brief(value)


class GateRuntime:
    """A gated run's gate: wait on a request, take decisions, judge them."""

    def __init__(self, run: AgentWorkflow) -> None:
        self.run = run  # read only: its machine, its state; moved by ``record``
        self.trust = run.trust  # the run's roster snapshot: admitted by it, re-read by the gate
        self.refresh_asked = False
        self.in_flight: Decision | None = None
        # (step, proposal digest, token) once the worker answered for the request at step.
        self.attested: tuple[int, str, str] | None = None
        self.audit = AuditTrail(AUDIT_KEEP)  # refusals: all counted, the newest kept
        self._validate_budget = TaskBudget(VALIDATE_PER_TASK, by_time=True)
        self._verify_budget = TaskBudget(VERIFY_PER_TASK)
        # Signalled decisions past a task's verify budget, judged in the next tasks, each as
        # it came; ahead of them, decoded, those that waited for a roster read (judged once
        # more, refused if their key is still unknown).
        self._held: deque[Sequence[RawValue] | dict[str, Any]] = deque()
        # Signalled decisions under unknown key ids, oldest first, each with the number of
        # roster reads begun before it came: it waits for a later one.
        self._unknown: deque[tuple[int, dict[str, Any]]] = deque()
        self._reads_begun = 0
        self._reads_done = 0  # begun and ended (read or not)
        self._updates_waiting = 0  # decide updates waiting for a roster read
        self._rechecks = 0  # decide updates that waited for one (ROSTER_RECHECKS at most)
        self._signals_taken = 0  # by this run (the server caps it: MAX_SIGNALS_PER_RUN)

    # --- the request -----------------------------------------------------------------------

    async def opening(self, gate: Gate) -> tuple[str, str | None, timedelta]:
        """The run id a request of ``gate`` opens in, and the tenant's role and shortest
        review window for it."""
        rule = self._snapshot().policy.gates.get(gate.name)
        # Recorded (an activity): a reset run replays earlier requests under a new
        # ``workflow.info().run_id`` and would refuse the decisions its history shows
        # accepted. Not a local activity: its marker could land a task early.
        run_id = await call_activity(
            RUN_ID_ACTIVITY, result_type=str, start_to_close_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10)),
            summary="the run id this request opens in")
        return (run_id, rule.role if rule else None,
                timedelta(seconds=rule.min_review_seconds if rule else 0))

    async def wait(self, gate: Gate, pending: GateRecord, *, resume: bool) -> Decision | None:
        """Publish the request the run holds at (with its attestation), then wait for a
        decision until it expires, re-reading the roster on time and when asked: the
        decision taken, or None (expired, or the history is long — a flood of signals — and
        the run carries over first, still waiting)."""
        run = self.run
        digest = proposal_digest(pending)
        token = await attestation(AttestRequest(
            tenant=self.tenant(), run_id=pending.run_id, gate=pending.gate, step=pending.step,
            proposal=digest, expires_at=int(pending.expires_at.timestamp())))
        self.attested = (pending.step, digest, token)
        run.publish()  # the request, with its attestation ("" unlisted: decidable by run id)
        run.show_details()  # the same story as at every step, now with the request
        if not resume:
            stream_sink.gate_opened(pending)
            notify(GateNotice(tenant=self.tenant(), run=workflow.info().workflow_id,
                              agent=run.machine.name, gate=pending.gate, role=pending.role,
                              node=pending.node, expires_at=pending.expires_at,
                              proposal=dict(pending.proposal),
                              shown=canonical_proposal(pending)))
        while self.in_flight is None and workflow.now() < pending.expires_at:
            if self._held:  # judged as far as this task's budget goes, oldest first
                while self._held and self.in_flight is None and self._verify_budget.take():
                    self._take_signal(self._held.popleft())
                if self.in_flight is None and self._held:
                    await workflow.sleep(HELD_PAUSE)
                continue
            if self._carry_now():
                break
            every = timedelta(seconds=self._snapshot().policy.roster_refresh_seconds)
            assert self.trust.read_at is not None  # admitted, or carried and re-read
            due = self.trust.read_at + (min(every, REFRESH_GAP) if self.refresh_asked
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
        return self.in_flight

    def closed(self) -> None:
        """The request is closed (a decision came first, or it expired): no decision is in
        flight, and what is held or waits for the roster is refused."""
        self.in_flight = None
        while self._held:  # as they came, or decoded (their key unknown when they came)
            self.audit.add(Code.NOT_JUDGED, HELD_UNJUDGED, self._held.popleft())
        self._refuse_waiting("the request closed before the roster was read again")

    def request_shown(self, state: AgentState) -> tuple[bool, PendingView | None]:
        """Whether ``state`` may be published, and the request its memo shows: a request is
        not, until the worker's attestation of it is back."""
        pending = pending_record(state)
        if pending is None:
            return True, None
        if not self._attested(pending.step):
            return False, None
        view = pending_view(self.run.machine, state)
        _, digest, token = self.attested or (0, "", "")
        if not token or view is None:  # not attested: shown, never listed
            return True, view
        return True, view.model_copy(update={"proposal_digest": digest, "attestation": token})

    def _decided_or_asked(self, was_asked: bool) -> Callable[[], bool]:
        return lambda: (self.in_flight is not None or self.refresh_asked != was_asked
                        or bool(self._held) or self._carry_now())

    def flooded(self) -> bool:
        """The run has taken so many signals it should carry over (the server caps them)."""
        return self._signals_taken >= CARRY_AFTER_SIGNALS

    def _carry_now(self) -> bool:
        """Carry over now: the agent carries while parked, Temporal suggests it or a flood
        nears the server's cap, and no decision waits for the roster's re-read (it is asked
        for, at most REFRESH_GAP away: a flood after a decision cannot carry it away)."""
        return (self.run.carry_while_parked and (
            self.flooded() or workflow.info().is_continue_as_new_suggested())
            and not self._unknown and not self._updates_waiting)

    async def _refresh(self) -> None:
        """Re-read the roster and policy; signalled decisions kept for it are judged again."""
        self.refresh_asked = False
        self._reads_begun += 1  # decisions kept before this read are judged after it
        try:
            await self.trust.read()
        except ApplicationError as exc:  # keep the snapshot; say why in the audit trail
            self.audit.add(Code.NOT_JUDGED, f"roster refresh failed: {exc.message}")
            self._refuse_waiting(f"the roster could not be read again ({exc.message})")
            return
        finally:
            self._reads_done += 1
        # The decisions that waited for this read go to the front of the held ones, in the
        # order they came (those that came while it was read wait for the next).
        read: list[dict[str, Any]] = []
        while self._unknown and self._unknown[0][0] < self._reads_begun:
            read.append(self._unknown.popleft()[1])
        self._held.extendleft(reversed(read))

    # --- decisions -------------------------------------------------------------------------

    def _snapshot(self) -> TrustSnapshot:
        assert self.trust.snapshot is not None  # run_machine refuses a gated run without one
        return self.trust.snapshot

    def judge(self, raw: Any) -> tuple[Decision | None, Check]:
        state = self.run.state
        if state is None:  # not started: no roster read yet, nothing pending
            return None, Check(False, "the run is not awaiting a decision: it has not "
                                      "started yet", code=Code.NOT_PENDING)
        decision, read = read_decision(raw, trust=self._snapshot(), now=workflow.now())
        if decision is None:
            return None, read
        return decision, check_decision(
            decision, state=state, gates={g.name: g for g in self.run.machine.gates.values()},
            tenant=self.tenant(), now=workflow.now(),
            in_flight=self.in_flight)

    def tenant(self) -> str:
        trust = self.trust.snapshot
        return trust.roster.tenant if trust is not None else workflow.info().namespace

    async def decide(self, raw: dict[str, Any]) -> Outcome:
        """The ``decide`` update: answers with the outcome the run reported."""
        # Checked again here: on replay the validator does not run, and a decision
        # accepted in the same workflow task may have decided the gate meanwhile. No
        # budget: the validator accepted it, and the handler must judge alike on replay.
        decision, check = self.judge(raw)
        if check.by_roster and self._awaiting():  # perhaps enrolled since the last read
            # Judged again once a roster read begun after now has ended (asked for: at most
            # one per REFRESH_GAP, however many wait), or the request closed.
            self._rechecks += 1
            begun, self.refresh_asked = self._reads_begun, True
            self._updates_waiting += 1
            try:
                await workflow.wait_condition(
                    lambda: self._reads_done > begun or not self._awaiting())
            finally:
                self._updates_waiting -= 1
            decision, check = self.judge(raw)
        if decision is None or not check.ok:
            code = check.code or Code.MALFORMED
            self.audit.add(code, check.reason, raw, via="update")
            raise failure(DecisionRefused(check.reason, code=code))
        if not check.duplicate:
            self.in_flight = decision
        decision_id = decision.decision_id
        await workflow.wait_condition(lambda: self._settled(decision_id))
        current = self.run.current
        record = record_of(current, decision_id)
        if record is None:
            return Outcome(decision_id=decision_id, gate=decision.gate,
                           result=GateStatus.PENDING, node=current.node,
                           status=current.status.value, step=current.step,
                           reason="the run ended before the decision was applied")
        return outcome(record, decision_id, current, check.duplicate)

    def validate(self, raw: dict[str, Any]) -> None:
        """The ``decide`` update's validator: refuses before the history holds it, but
        one the roster refuses while a request waits (judged again after a re-read)."""
        if self.run.state is not None and not self._validate_budget.take():
            raise failure(DecisionRefused(UNVALIDATED, code=Code.OVERLOADED))
        _, check = self.judge(raw)
        rechecked = check.by_roster and self._awaiting()
        if check.ok or (rechecked and self._rechecks < ROSTER_RECHECKS):
            return
        reason = check.reason
        if rechecked:
            reason += (f"; this run has re-read its roster for {ROSTER_RECHECKS} decisions "
                       "already: it reads it again on its timer, or when sent refresh_trust")
        raise failure(DecisionRefused(reason, code=check.code or Code.MALFORMED))

    def _awaiting(self) -> bool:
        """A request waits for a decision (and none is being applied)."""
        return self.in_flight is None and pending_record(self.run.state) is not None

    def _attested(self, step: int) -> bool:
        """Has the worker answered for the request opened at ``step`` (token or not)?"""
        return self.attested is not None and self.attested[0] == step

    def _settled(self, decision_id: str) -> bool:
        record = record_of(self.run.current, decision_id)
        return (record is not None and record.status != GateStatus.PENDING) or (
            self.run.current.node in TERMINALS and self.in_flight is None)

    def approvals(self) -> dict[str, Any]:
        """The ``approvals`` query: the pending request (once published), every request so
        far, and the refused decisions."""
        state, trust, refreshed = self.run.state, self.trust.snapshot, self.trust.read_at
        pending, records = pending_record(state), state.approvals if state else []
        if pending is not None and not self._attested(pending.step):  # not published yet
            pending, records = None, [r for r in records if r is not pending]
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
            "records": [r.model_dump(mode="json") for r in records],
            "refused": [r.model_dump(mode="json") for r in self.audit.refusals()],
            "refused_total": self.audit.total,
            # Signalled decisions not judged yet: past a task's budget, or waiting for the
            # roster's re-read (signed by a key the snapshot does not name).
            "held": len(self._held),
            "waiting_for_roster": len(self._unknown) + self._updates_waiting,
        }

    # --- signals ---------------------------------------------------------------------------

    def take(self, name: str, args: Sequence[RawValue]) -> None:
        """Every signal, taken raw (a typed handler would fail the workflow task, on every
        retry, on inputs it cannot decode): ``decision``, or ``refresh_trust`` (no authority:
        anyone may ask the roster be re-read soon); any other name is refused."""
        self._signals_taken += 1
        if name == "refresh_trust":
            self.refresh_asked = True
        elif name != "decision":
            self.audit.add(Code.UNKNOWN_SIGNAL, f"unknown signal {name[:80]!r}: nothing changed",
                           args)
        elif self.run.state is not None and (self._held or not self._verify_budget.take()):
            # Past this task's verify budget (or behind ones held already): held, undecoded,
            # and judged in a later task (a flood delays a genuine decision, never refuses
            # it); with no request to decide, refused now.
            if pending_record(self.run.state) is not None:
                self._held.append(args)
            else:
                self.audit.add(Code.OVERLOADED, UNVERIFIED, args,
                               at=self._verify_budget.task_time)
        else:
            self._take_signal(args)

    def _take_signal(self, held: Sequence[RawValue] | dict[str, Any]) -> None:
        """Judge a signalled decision: its inputs as they came, or (a dict) one that waited
        for a roster read already."""
        if isinstance(held, dict):
            raw: Any = held
        else:
            raw, problem = decoded(held)
            if raw is None:
                self.audit.add(Code.MALFORMED, problem, held)
                return
        decision, check = self.judge(raw)
        # Refused for what the roster says: perhaps a key or role added since the run's last
        # read. Unless it waited once already, or no request waits for a decision, it is kept
        # (the token alone: what decides) for a roster read begun after it came, and one is
        # asked for; if UNKNOWN_KEEP wait already it is refused (a flood after it cannot push
        # it out).
        waits = check.by_roster and not isinstance(held, dict) and self._awaiting()
        if waits and len(self._unknown) < UNKNOWN_KEEP:
            self._unknown.append((self._reads_begun, {"token": raw["token"]}))
            self.refresh_asked = True
        elif not check.ok or check.duplicate:
            reason = check.reason or "duplicate of an accepted decision: nothing changed"
            self.audit.add(check.code or Code.DUPLICATE, reason + (UNKNOWN_FULL if waits else ""),
                           raw)
        else:
            self.in_flight = decision

    def _refuse_waiting(self, why: str) -> None:
        """Refuse the decisions waiting for a roster read: the request closed, or the read
        failed (after its retries: waiting longer would hold the run from carrying over)."""
        while self._unknown:
            self.audit.add(Code.NOT_JUDGED, f"{UNKNOWN_UNJUDGED}; {why}: nothing changed",
                           self._unknown.popleft()[1])


# --- the activities a gate schedules as a request opens ----------------------------------


async def attestation(request: AttestRequest) -> str:
    """The deployment's worker vouching for this request: its token, or "" when it has no
    key or cannot answer (the request is then unlisted, still decidable by run id)."""
    # A decision may come in the same workflow task as the answer: the memo is upserted
    # there, after it, never in an activation a worker ran for a query (``call_activity``).
    try:
        return await call_activity(
            ATTEST_ACTIVITY, request, result_type=str,
            start_to_close_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=5),
                                     maximum_attempts=3),
            summary=f"attest request · gate {request.gate}")
    except ActivityError as exc:
        workflow.logger.warning("gate %s: request not attested: %s", request.gate, exc)
        return ""


def notify(notice: GateNotice) -> None:
    """Tell the tenant's approvers (its webhook). Not awaited: the wait for a decision
    starts at once; a failure after the retries is only logged."""
    sent = workflow.start_activity(
        "notify_gate", notice, start_to_close_timeout=timedelta(seconds=20),
        retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10),
                                 maximum_attempts=NOTIFY_ATTEMPTS),
        summary=f"notify approvers · gate {notice.gate}")
    sent.add_done_callback(lambda done: _log_unsent(notice.gate, done))


@activity.defn  # named by the function: RUN_ID_ACTIVITY
async def tower_run_id() -> str:
    """The run id of the workflow run that calls it (``GateRuntime.opening``)."""
    run_id = activity.info().workflow_run_id
    assert run_id is not None, "called outside a workflow run"
    return run_id


def _log_unsent(gate: str, done: Any) -> None:
    if not done.cancelled() and done.exception() is not None:
        workflow.logger.warning("gate %s: approvers not notified: %s", gate, done.exception())

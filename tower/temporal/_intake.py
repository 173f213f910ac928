"""Signal intake: every signal a gated run takes, and the decisions it keeps for later.

Anyone may send any signal with any inputs, as fast as the server takes them (see
tower/temporal/_refusals.py). A decision signal is judged at once while this workflow task's
signature budget lasts; past it, it is *held*, undecoded and in order, and judged in the
tasks that follow. One signed by a key the run's roster snapshot does not know yet (added
since the run read the roster, or forged) is kept until the run has re-read its roster
(``GateRuntime._refresh``), then judged again with the held ones, as far as the budget goes.

Bounds, against a sender who may send anything: a run takes at most MAX_SIGNALS_PER_RUN
signals; at most UNKNOWN_KEEP decisions wait for a re-read, each kept as its token alone
(at most 8,000 characters); one arriving when they are that many is refused, never one
that came before it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio import workflow
from temporalio.common import RawValue

from tower.contract import names
from tower.contract.refusals import RefusalCode
from tower.core.gates import pending_record
from tower.temporal._refusals import TaskBudget, decoded

if TYPE_CHECKING:
    from tower.temporal._gate import GateRuntime

VERIFY_PER_TASK = 50  # signature checks per workflow task (refusals.TaskBudget)
UNVERIFIED = (f"refused unverified: more than {VERIFY_PER_TASK} decisions arrived in one "
              "workflow task (a flood?); send it again, as the decide update")
# Signalled decisions past a task's budget are held and judged, in order, in the tasks that
# follow (a short timer makes each); with no request to decide, refused at once, UNVERIFIED.
HELD_PAUSE = timedelta(milliseconds=10)
HELD_UNJUDGED = "the request closed before this decision was judged (a flood?): nothing changed"
# Signalled decisions under unknown key ids wait for the roster's re-read, as many as
# UNKNOWN_KEEP, and are then judged like held ones.
UNKNOWN_KEEP = 100
UNKNOWN_FULL = (f"; not kept for the run's next roster read: {UNKNOWN_KEEP} decisions under "
                "unknown keys wait for it already (a flood?); send it again once the run has "
                "re-read its roster, or as the decide update")
UNKNOWN_UNJUDGED = "signed by a key the run's roster did not name"


@dataclass(frozen=True)
class AfterRead:
    """A held decision that waited for a roster read, which has happened since it came:
    judged once more, and refused if its key is still unknown."""

    message: dict[str, Any]


class Intake:
    """A gate's signals: ``take`` each one, and the decisions held for later tasks."""

    def __init__(self, gate: GateRuntime) -> None:
        self._gate = gate  # whose judge, audit trail and in-flight decision these are
        # Signalled decisions under unknown key ids, oldest first, each with the number of
        # roster reads begun before it came (``reads_begun``): it waits for a later one.
        self.unknown: deque[tuple[int, dict[str, Any]]] = deque()
        self.reads_begun = 0  # roster re-reads this run began (GateRuntime._refresh)
        # Signature checks per task of signals (and of what a roster refresh judges again).
        self.verify_budget = TaskBudget(VERIFY_PER_TASK)
        # Signalled decisions past a task's verify budget, judged in the next tasks
        # (take_held), and ahead of them those that waited for a roster read.
        self.held: deque[Sequence[RawValue] | AfterRead] = deque()
        self.signals_taken = 0  # by this run (the server caps it: refusals.py)

    def take(self, name: str, args: Sequence[RawValue]) -> None:
        """Every signal, taken raw (the run's dynamic handler): a typed handler would drop an
        input it cannot decode and fail the workflow task, on every retry, on a wrong number
        of inputs. Here each is judged or refused into the audit trail, decoded if needed.

        ``decision``: a decision. ``refresh_trust``: re-read the roster soon (it carries no
        authority: anyone may ask, inputs are ignored). Any other name is refused.
        """
        self.signals_taken += 1
        if name == names.DECISION.name:
            self._signalled_decision(args)
        elif name == names.REFRESH_TRUST.name:
            self._gate.refresh_asked = True
        else:
            self._gate.audit.add_raw(workflow.now(), "signal", RefusalCode.UNKNOWN_SIGNAL,
                                     f"unknown signal {name[:80]!r}: nothing changed", args)

    def _signalled_decision(self, args: Sequence[RawValue]) -> None:
        """A decision as a signal. Refused ones change nothing and go to the audit trail.
        Past this task's verify budget (or behind ones held already) it is held, undecoded,
        and judged in a later task (``take_held``): a flood delays a genuine decision by a
        few tasks, never refuses it."""
        state = self._gate.run._state
        if state is not None and (self.held or not self.verify_budget.take()):
            if pending_record(state) is not None:
                self.held.append(args)
            else:  # no request to decide
                self._gate.audit.add_raw(self.verify_budget.task_time, "signal",
                                         RefusalCode.OVERLOADED, UNVERIFIED, args)
            return
        self._take_decoded(args)

    def take_held(self) -> None:
        """Judge held decisions, oldest first, while this task's verify budget lasts."""
        while self.held and self._gate.in_flight is None and self.verify_budget.take():
            held = self.held.popleft()
            if isinstance(held, AfterRead):
                self._take_signal(held.message, may_hold=False)
            else:
                self._take_decoded(held)

    def _take_decoded(self, args: Sequence[RawValue]) -> None:
        raw, problem = decoded(args)
        if raw is None:
            self._gate.audit.add_raw(workflow.now(), "signal", RefusalCode.MALFORMED, problem,
                                     args)
            return
        self._take_signal(raw, may_hold=True)

    def _take_signal(self, raw: Any, *, may_hold: bool) -> None:
        gate = self._gate
        decision, check = gate.judge(raw)
        if may_hold and check.unknown_key:
            # Perhaps a key added since the run's last refresh: judge it again after one.
            self._wait_for_roster(raw, check.reason)
            return
        if not check.ok or check.duplicate:
            reason = check.reason or "duplicate of an accepted decision: nothing changed"
            gate.audit.add(workflow.now(), "signal", check.code or RefusalCode.DUPLICATE,
                           reason, raw)
            return
        gate.in_flight = decision

    def _wait_for_roster(self, raw: Any, reason: str) -> None:
        """Keep a decision under an unknown key id until a roster read begun after it came
        (``judge_kept``) and ask for one; refuse it if no request waits for a decision or
        UNKNOWN_KEEP wait already (so a flood after it cannot push it out)."""
        gate = self._gate
        if gate.in_flight is not None or pending_record(gate.run._state) is None:
            gate.audit.add(workflow.now(), "signal", RefusalCode.UNKNOWN_KEY, reason, raw)
        elif len(self.unknown) >= UNKNOWN_KEEP:
            gate.audit.add(workflow.now(), "signal", RefusalCode.UNKNOWN_KEY,
                           reason + UNKNOWN_FULL, raw)
        else:  # the token alone: what decides (read_decision reads a token before the rest)
            self.unknown.append((self.reads_begun, {"token": raw["token"]}))
            gate.refresh_asked = True

    def judge_kept(self) -> None:
        """After a roster read: the decisions that waited for it go to the front of the
        held ones, in the order they came, to be judged as the budget allows (those that
        came while it was read wait for the next)."""
        read: list[AfterRead] = []
        while self.unknown and self.unknown[0][0] < self.reads_begun:
            read.append(AfterRead(self.unknown.popleft()[1]))
        self.held.extendleft(reversed(read))

    def refuse_held(self) -> None:
        """The request closed (a decision came first, or it expired): refuse what is held."""
        while self.held:
            held = self.held.popleft()
            if isinstance(held, AfterRead):  # its key unknown when it came
                self._gate.audit.add(workflow.now(), "signal", RefusalCode.NOT_JUDGED,
                                     HELD_UNJUDGED, held.message)
            else:
                self._gate.audit.add_raw(workflow.now(), "signal", RefusalCode.NOT_JUDGED,
                                         HELD_UNJUDGED, held)
        self.refuse_waiting("the request closed before the roster was read again")

    def refuse_waiting(self, why: str) -> None:
        """Refuse the decisions waiting for a roster read: the request closed, or the read
        failed (after its retries: waiting longer would hold the run from carrying over)."""
        while self.unknown:
            self._gate.audit.add(workflow.now(), "signal", RefusalCode.NOT_JUDGED,
                                 f"{UNKNOWN_UNJUDGED}; {why}: nothing "
                                 "changed", self.unknown.popleft()[1])

"""Refused decisions: signals taken raw, and the run's audit trail of what it refused.

Anyone who can signal a run can send any signal with any inputs, thousands in one workflow
task, and the SDK's deadlock detector gives the task 2 seconds. So a signal is decoded only
when it is judged; a refusal costs a counter and a tuple, and the newest ``keep`` are kept
raw (size-capped) and made ``Refusal`` records only when the ``approvals`` query asks.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from temporalio import workflow
from temporalio.common import RawValue

from tower.contract.failures import Code
from tower.core.gates import Refusal
from tower.temporal.payloads import UnopenablePayload

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


class TaskBudget:
    """At most ``limit`` of something per workflow task, so that a flood in one task does
    not keep it past the SDK's deadlock timeout.

    A task is told apart by the history's length, so a replay counts the same. ``by_time``
    also tells tasks apart by their time, for update validators: a refused update never
    reaches the history, so a budget keyed on its length alone stayed spent after a flood,
    refusing a genuine update too. Validators never run on replay, so time is safe there."""

    def __init__(self, limit: int, *, by_time: bool = False) -> None:
        self.limit = limit
        self.by_time = by_time
        self.task_time = datetime.min  # workflow.now() when this task's count began
        self._mark: tuple[int, datetime] | None = None
        self._used = 0

    def take(self) -> bool:
        """Count one; whether it is within this task's budget."""
        now = workflow.now()
        mark = (workflow.info().get_current_history_length(),
                now if self.by_time else datetime.min)
        if mark != self._mark:
            self._mark, self._used, self.task_time = mark, 0, now
        self._used += 1
        return self._used <= self.limit


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

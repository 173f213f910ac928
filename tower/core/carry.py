"""What a run carries into its next run when it continues-as-new: the state whole (long
content lives in the message store) and the log as a bounded summary, so the carried input
does not grow with the run's age.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from tower.contract.trust import TrustSnapshot
from tower.core.engine import Transition

RECENT = 5  # transitions kept in the summary, without their updates
REASON_CHARS = 200  # a carried transition's reason is cut to this
CALLS = 10  # ... and its calls to these


class LogSummary(BaseModel):
    runs: int = 1  # runs (continue-as-new segments) the log spans, this one included
    transitions: int = 0
    first_step: int = 0
    last_step: int = 0
    moves: dict[str, int] = Field(default_factory=dict)  # "source -> target": count
    # The last moves, each cut to a bounded size: no update (it can be as large as the
    # state; the full entry is in its own run's history), a short reason, the first calls.
    recent: list[Transition] = Field(default_factory=list)


class Carry(BaseModel):
    """The input of the next run: the state and the log so far, summarised. The next run
    takes it only from the run it continued from (``run_id``): a cron or retry run repeats its
    first input, which a requester wrote (tower/temporal/_machine_run.py ``own_carry``)."""

    # None only in the carries of runs recorded before (they replay without the check).
    run_id: str | None = Field(default=None, min_length=1, max_length=100)
    state: dict[str, Any]
    log: LogSummary
    # The roster and policy the run verified with (public keys only), so the next run can
    # judge a decision from its first workflow task (MachineRun.take_start).
    trust: TrustSnapshot | None = None


def summarize(previous: LogSummary | None, log: list[Transition], *,
              recent: int = RECENT) -> LogSummary:
    """Fold this run's log into the summary carried from earlier runs."""
    base = previous or LogSummary(runs=0)
    moves = dict(base.moves)
    for t in log:
        key = f"{t.source} -> {t.target}"
        moves[key] = moves.get(key, 0) + 1
    first = base.first_step if base.transitions else (log[0].step if log else 0)
    last = log[-1].step if log else base.last_step
    return LogSummary(runs=base.runs + 1, transitions=base.transitions + len(log),
                      first_step=first, last_step=last, moves=moves,
                      recent=[brief(t) for t in [*base.recent, *log][-recent:]] if recent else [])


def brief(t: Transition) -> Transition:
    """``t`` without its update, its reason and calls cut: bounded whatever the node did."""
    return t.model_copy(update={"update": {}, "reason": t.reason[:REASON_CHARS],
                                "calls": t.calls[:CALLS]})

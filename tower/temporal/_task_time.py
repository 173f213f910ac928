"""Act on an activity's result or a timer only inside a workflow task.

A worker answering a query for a run it has not cached replays the run's history (a
"legacy" query). When the history it is handed already holds an event past the last
completed workflow task — an activity's result, with the task that will carry it still
waiting for a worker — the worker applies that event and runs the workflow code on it,
although no workflow task is open there. The commands the code makes are sent nowhere; the
worker keeps the run cached, and sends them with the next workflow task it completes for the
run, *before* whatever that task adds. If that task also takes a decision (the ``decide``
update), the history records [the code's commands, the update's acceptance]; a replay hands
the result and the update to the code in one activation, updates first, and makes
[acceptance, commands]: TMPRL1100 "Update machine does not handle this event", and the run
can no longer be replayed (a query fails, a worker that lost it cannot resume it).
docs/reliability.md ("Nondeterminism found by the checker") tells how it was found.

Such an activation is recognizable from inside: no workflow task started in it, so workflow
time has not moved since the code began to wait (an activity's result or a timer always
comes in a later task, whose start time is later). ``in_a_task`` then fails that activation,
making no command: the worker drops the run from its cache (the query is answered again
from a fresh replay), and the workflow task that carries the event replays the run whole
and goes on there, after any update that task brings, as a replay runs it. In every other
activation it returns at once without yielding, so a run's commands and their order are
what they were: recorded histories replay as before.

It used to *wait* there for time to move. That hung runs (the issue's "2 of 7 runs RUNNING
with nothing pending" after a worker was SIGKILLed mid-refund): when the task carrying the
event brought nothing else, the worker, which had applied the event already, gave the code
no activation at all, completed the task empty, and the code waited for the next unrelated
signal (tests/test_stuck_after_query.py).
"""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow

from tower.contract.failures import Code, TowerError
from tower.temporal._query_retry import AHEAD_OF_ITS_TASK


class AheadOfItsTask(TowerError):
    """An activation a query's replay ran on an event no workflow task has taken yet; not a
    failure type: the activation fails and the worker drops the run, nothing else."""

    CODE = Code.AHEAD_OF_ITS_TASK


async def in_a_task(since: datetime) -> None:
    """Return at once if workflow time has moved past ``since`` (the time the code began to
    wait for the event it has just been handed); else this is an activation a worker ran for
    a query, ahead of the task that will carry the event: fail it (see above)."""
    if workflow.now() == since:
        raise AheadOfItsTask(AHEAD_OF_ITS_TASK)

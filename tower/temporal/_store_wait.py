"""A call that failed on a store waits for the store, never failing its run.

An activity fails its attempt when a store it needs cannot serve it: the message store
unreachable or lacking an entry another host wrote (tower/activities/stores.py), or the
payload store unable to write a result over the threshold or to read an input
(tower/temporal/payloads.py; the SDK reports these under the error's class name). When the
activity's own retries run out while the store is still away, the workflow waits
``STORE_WAIT`` and asks again, round after round, until a worker that can serve it does:
another host, the store back, or a fixed setting. The same call is asked again, with the same
idempotency key, so a side effect made before its result could be stored is not made twice
(tower.effects returns the recorded result).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

from tower.temporal._task_time import in_a_task

STORE_WAIT = timedelta(seconds=30)  # between rounds of a call's store retries


async def wait_for_store() -> None:
    """``STORE_WAIT`` of workflow time, then on inside a workflow task (_task_time.py)."""
    since = workflow.now()
    await workflow.sleep(STORE_WAIT)
    await in_a_task(since)

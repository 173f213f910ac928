"""A call that failed on a store waits for the store, never failing its run.

An attempt fails when a store it needs cannot serve it (tower/activities/stores.py; the
payload store: tower/temporal/payloads.py). When the activity's retries run out while the
store is still away, the workflow waits ``STORE_WAIT`` and asks again, round after round,
with the same idempotency key, so an effect made before its result was stored is not made
twice (tower.effects returns the recorded result).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

from tower.temporal._task_time import in_a_task

STORE_WAIT = timedelta(seconds=30)  # between rounds of a call's store retries


async def wait_for_store() -> None:
    since = workflow.now()
    await workflow.sleep(STORE_WAIT)
    await in_a_task(since)

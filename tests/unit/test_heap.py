"""TowerPlugin's run context freezes the heap while a process's workers run (heap.py)."""

from __future__ import annotations

import gc

from tower.temporal.heap import frozen_heap


async def test_the_heap_is_frozen_while_any_worker_runs_and_released_after_the_last() -> None:
    assert gc.get_freeze_count() == 0
    async with frozen_heap():
        frozen = gc.get_freeze_count()
        assert frozen > 0
        async with frozen_heap():  # a second worker in the same process: nothing refrozen
            assert gc.get_freeze_count() == frozen
        assert gc.get_freeze_count() == frozen  # the first still runs
    assert gc.get_freeze_count() == 0

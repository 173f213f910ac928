"""What a Tower worker (or replayer) has loaded stays out of the collector's way.

Anyone who can signal a run can make one workflow task hold a thousand signals (the
servers' per-run cap, tower/temporal/_refusals.py). Applying them allocates enough to set off
several full collections, and a full pass rescans the whole heap: in a process that has
loaded a lot (a test run hundreds of tests long, a worker hosting many agents) that pushed
the task past the SDK's 2 s deadlock detector, and every retry of the task did the same —
the run stalled. Objects frozen with ``gc.freeze`` are skipped by those passes, so while a
worker runs, what was alive when it started is frozen.
"""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

_running = 0  # workers and replayers running in this process


@asynccontextmanager
async def frozen_heap() -> AsyncIterator[None]:
    """Freeze the heap while the first of this process's workers runs; unfreeze it when the
    last one stops (so a process that runs many in turn, a test suite, frees what they left)."""
    global _running
    if _running == 0:
        gc.collect()  # no garbage frozen for good
        gc.freeze()
    _running += 1
    try:
        yield
    finally:
        _running -= 1
        if _running == 0:
            gc.unfreeze()

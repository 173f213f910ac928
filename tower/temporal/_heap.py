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
_collected = False  # the process's first freeze collected its garbage first


@asynccontextmanager
async def frozen_heap() -> AsyncIterator[None]:
    """Freeze the heap while the first of this process's workers runs; unfreeze it when the
    last one stops (so a process that runs many in turn, a test suite, frees what they left)."""
    global _running, _collected
    if _running == 0:
        if not _collected:
            # A worker's process freezes once, for the worker's whole life: no garbage frozen
            # for good. A later freeze (a process running workers or replayers in turn) skips
            # the full pass, which costs the whole heap (~55 ms in a replaying process, as
            # much as a short history's replay): what garbage it freezes is released when
            # the last of them stops, with the rest.
            gc.collect()
            _collected = True
        gc.freeze()
    _running += 1
    try:
        yield
    finally:
        _running -= 1
        if _running == 0:
            gc.unfreeze()

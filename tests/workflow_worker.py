"""``python tests/workflow_worker.py``: the project's worker (worker.py) polling workflow
tasks only — a test runs the activities in a worker of its own, to hold one of them."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import worker  # noqa: E402

if __name__ == "__main__":
    worker.Worker = functools.partial(  # type: ignore[attr-defined]
        worker.Worker, no_remote_activities=True)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(worker.main())

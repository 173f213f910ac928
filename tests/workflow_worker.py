"""``python tests/workflow_worker.py``: the project's worker (worker.py) polling workflow
tasks only — a test runs the activities in a worker of its own, to hold one of them."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from temporalio.worker import Worker  # noqa: E402

import tower.temporal.worker  # noqa: E402
import worker  # noqa: E402


class WorkflowsOnly(Worker):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, no_remote_activities=True, **kwargs)


if __name__ == "__main__":
    # worker.main() builds it with tower.temporal.build_worker, by this name.
    tower.temporal.worker.Worker = WorkflowsOnly  # type: ignore[misc]
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(worker.main())

"""``python -m tests.jepsen [--trials N] [--seed S]``: run the checker, print every violation.

Starts its own dev server and two worker processes on a fresh tools' database, runs the
trials ``--parallel`` at a time (faults hit every trial in flight), and exits 1 on any
violation. The pytest module (tests/test_jepsen.py) runs the same trials with a CI budget.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

# The test helpers (procs, gatekit) are imported the way pytest imports them.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from procs import DevServer  # noqa: E402

from .runner import run_trials, summary, workers  # noqa: E402
from .trial import World  # noqa: E402


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--seed", type=int, default=int(os.environ.get("JEPSEN_SEED", "1")))
    parser.add_argument("--parallel", type=int, default=17)
    parser.add_argument("--verbose", action="store_true", help="print each trial's faults")
    args = parser.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="jepsen-") as tmp:
        workdir = Path(tmp)
        server = DevServer(workdir / "temporal.sqlite", workdir / "server.log")
        client = await server.start()
        try:
            async with workers(server.address, workdir) as (task_queue, db_path, procs):
                world = World(client, db_path, task_queue, procs)
                outcomes = await run_trials(world, args.trials, args.seed, args.parallel)
        finally:
            server.stop()
    print(summary(outcomes))
    if args.verbose:
        for o in outcomes:
            print(f"  trial {o.trial} ({o.invoice}, {o.runs} runs): {'; '.join(o.faults)}")
    print(f"seed {args.seed}, {time.monotonic() - started:.0f} s")
    return 1 if any(o.problems for o in outcomes) else 0


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds main(): the workers and the server are stopped


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _stop)
    sys.exit(asyncio.run(main()))

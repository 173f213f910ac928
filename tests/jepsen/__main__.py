"""``python -m tests.jepsen [--trials N] [--seed S]``: run the checker, print every violation.

Starts its own dev server and two worker processes on a fresh tools' database, runs the
trials ``--parallel`` at a time (faults hit every trial in flight), and exits 1 on any
violation, harness error or exception nobody handled in a worker's log. The pytest module
(tests/test_jepsen.py) runs the same trials with a CI budget.
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

from .bounds import bounded  # noqa: E402
from .runner import run_trials, summary, workers  # noqa: E402
from .world import World  # noqa: E402

SERVER_SECONDS = 120.0


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--seed", type=int, default=int(os.environ.get("JEPSEN_SEED", "1")))
    parser.add_argument("--parallel", type=int, default=25)
    parser.add_argument("--verbose", action="store_true", help="print each trial's faults")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="work in DIR and keep it (server and worker logs, the database)")
    parser.add_argument("--evidence", type=Path, metavar="DIR",
                        help="where a failed trial's histories go (default: DIR/evidence "
                             "with --keep, else jepsen-evidence-PID in the temp folder)")
    args = parser.parse_args()
    if args.evidence is None:  # outlives the work directory, which is removed at the end
        args.evidence = (args.keep / "evidence" if args.keep else
                         Path(tempfile.gettempdir()) / f"jepsen-evidence-{os.getpid()}")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="jepsen-") as tmp:
        workdir = args.keep or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        trusted(workdir)
        server = DevServer(workdir / "temporal.sqlite", workdir / "server.log")
        try:
            client = await bounded("starting the dev server", SERVER_SECONDS, server.start())
            async with workers(server.address, workdir) as (task_queue, db_path, procs):
                world = World(client, db_path, task_queue, procs, evidence=args.evidence)
                outcomes = await run_trials(world, args.trials, args.seed, args.parallel)
                unhandled = [line for proc in procs for line in proc.unhandled()]
        finally:
            server.stop()
    print(summary(outcomes))
    if args.verbose:
        for o in outcomes:
            print(f"  trial {o.trial} ({o.invoice}, {o.runs} runs, {o.seconds:.0f} s): "
                  f"{'; '.join(o.faults)}")
    print(f"unhandled exceptions in the workers' logs: {len(unhandled)}")
    for line in unhandled[:5]:
        print(f"  {line}")
    print(f"seed {args.seed}, parallel {args.parallel}, {time.monotonic() - started:.0f} s")
    return 1 if unhandled or any(o.problems or o.harness for o in outcomes) else 0


def trusted(workdir: Path) -> None:
    """The approvers' own keys in the work directory, not the user's (the workers' roster
    is made from them: runner.deployment)."""
    os.environ["TOWER_CONFIG_DIR"] = str(workdir / "approvers")


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds main(): the workers and the server are stopped


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _stop)
    sys.exit(asyncio.run(main()))

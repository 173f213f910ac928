"""The checker's world (two worker processes on one database) and its trial loop."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from procs import WorkerProcess

from activities.tools import ToolBox

from .trial import Outcome, World, trial

Workers = tuple[str, Path, list[WorkerProcess]]
WORKERS = 2


def worker_process(address: str, task_queue: str, db_path: Path, log: Path) -> WorkerProcess:
    proc = WorkerProcess(address, task_queue, db_path, "", log,
                         argv=("-m", "tests.jepsen.worker"))
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "TOWER_MODELS"):
        proc.env.pop(name, None)  # the offline scripted model: the checker tests the money
    return proc


@asynccontextmanager
async def workers(address: str, workdir: Path) -> AsyncIterator[Workers]:
    task_queue, db_path = f"jepsen-{uuid.uuid4().hex[:8]}", workdir / "tools.sqlite"
    ToolBox(db_path)  # created and seeded before any worker races to do it
    procs = [worker_process(address, task_queue, db_path, workdir / f"worker-{i}.log").start()
             for i in range(WORKERS)]
    try:
        yield task_queue, db_path, procs
    finally:
        for proc in procs:
            proc.stop()


async def run_trials(world: World, trials: int, seed: int, parallel: int,
                     report: bool = True) -> list[Outcome]:
    rng, outcomes = random.Random(seed), []
    for first in range(0, trials, parallel):
        wave = range(first, min(trials, first + parallel))
        outcomes += await asyncio.gather(*(trial(world, n, random.Random(rng.random()))
                                           for n in wave))
        if report:
            bad = sum(bool(o.problems) for o in outcomes)
            print(f"{time.strftime('%H:%M:%S')} trials {len(outcomes)}/{trials}: {bad} with "
                  "violations", flush=True)
    return outcomes


def summary(outcomes: list[Outcome]) -> str:
    runs = sum(o.runs for o in outcomes)
    faults = [f.split(" ")[0] for o in outcomes for f in o.faults]
    kinds = {k: faults.count(k) for k in sorted(set(faults))}
    bad = [o for o in outcomes if o.problems]
    lines = [f"{len(outcomes)} trials, {runs} refund runs, faults {kinds}: "
             f"{sum(len(o.problems) for o in bad)} violations"]
    lines += [f"  trial {o.trial} ({o.invoice}; {', '.join(o.faults)}): {p}"
              for o in bad for p in o.problems]
    return "\n".join(lines)

"""The checker's world (two worker processes on one database) and its trial loop."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from procs import WorkerProcess

from activities.tools import ToolsDb
from tower.cli.trust_files import dev_trust

from .bounds import HarnessStuck, bounded
from .histories import keep
from .store import prepare_pg
from .trial import LIMITS, trial
from .world import ForkedWorker, Notes, Outcome, World, Zygote

Workers = tuple[str, Path, list[ForkedWorker]]
WORKERS = 2
# A trial that has not ended by then is reported, not waited for (its own steps are bounded
# far below this: settling twice, and each operator call).
TRIAL_SECONDS = 900.0


def worker_env(address: str, task_queue: str, db_path: Path, trust: Path, pg: str = "",
               kills: Path | None = None) -> dict[str, str]:
    """The checker workers' environment: a worker.py's on this server, queue and database."""
    env = WorkerProcess(address, task_queue, db_path, "", Path()).env
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "TOWER_MODELS"):
        env.pop(name, None)  # the offline scripted model: the checker tests the money
    env["TOWER_TRUST_DIR"] = str(trust)
    env["JEPSEN_PG"] = pg  # the checker worker's own settings (worker.py)
    env["JEPSEN_KILLS"] = str(kills or "")
    return env


def deployment(workdir: Path) -> Path:
    """The workers' trust directory: the approvers (their keys in TOWER_CONFIG_DIR, where the
    trials' approvers sign) and a refund cap the trials' runs may only lower."""
    root = workdir / "deployment"
    dev_trust(root, "default", agents={"refund": {"limit_cents": max(LIMITS)}})
    return root


@asynccontextmanager
async def workers(address: str, workdir: Path, *, pg: str = "", kills: Path | None = None
                  ) -> AsyncIterator[Workers]:
    """The checker's workers; ``pg``: the refunds on that PostgreSQL database; ``kills``: the
    folder where trials arm kills at an effect's points (kills.py)."""
    task_queue, db_path = f"jepsen-{uuid.uuid4().hex[:8]}", workdir / "tools.sqlite"
    ToolsDb(db_path)  # created and seeded before any worker races to do it
    if pg:
        prepare_pg(pg)
    if kills is not None:
        kills.mkdir(parents=True, exist_ok=True)
    env = worker_env(address, task_queue, db_path, deployment(workdir), pg, kills)
    zygote = Zygote(env, workdir / "zygote.log")
    procs = [ForkedWorker(zygote, workdir / f"worker-{i}.log").start() for i in range(WORKERS)]
    try:
        yield task_queue, db_path, procs
    finally:
        for proc in procs:
            proc.stop()
        zygote.close()


async def run_trials(world: World, trials: int, seed: int, parallel: int,
                     report: bool = True) -> list[Outcome]:
    """``trials`` trials, ``parallel`` in flight at any time (a new one starts as one ends),
    each within TRIAL_SECONDS: past it, the outcome is a harness error naming the step the
    trial was waiting for."""
    rng, gate = random.Random(seed), asyncio.Semaphore(parallel)
    seeds, outcomes = [rng.random() for _ in range(trials)], list[Outcome]()

    async def one(number: int) -> Outcome:
        async with gate:
            notes, began = Notes(), time.monotonic()
            try:
                outcome = await bounded(f"trial {number}", TRIAL_SECONDS,
                                        trial(world, number, random.Random(seeds[number]), notes))
            except HarnessStuck as stuck:
                outcome = Outcome(number, "?", 0, notes.faults, [],
                                  [*notes.harness, f"{stuck} (it was {notes.doing})"])
            outcome.seconds = time.monotonic() - began
            if world.evidence is not None and (outcome.problems or outcome.harness):
                outcome.evidence = world.evidence / f"trial-{number}"
                outcome.harness += await keep(world.client, outcome.evidence, notes.runs,
                                              outcome.problems + outcome.harness)
            outcomes.append(outcome)
            if report and (len(outcomes) % 10 == 0 or len(outcomes) == trials):
                print(f"{time.strftime('%H:%M:%S')} trials {len(outcomes)}/{trials}: "
                      f"{sum(bool(o.problems) for o in outcomes)} with violations, "
                      f"{sum(bool(o.harness) for o in outcomes)} with harness errors", flush=True)
            return outcome

    return list(await asyncio.gather(*(one(n) for n in range(trials))))


def summary(outcomes: list[Outcome]) -> str:
    runs = sum(o.runs for o in outcomes)
    faults = [f.split(" ")[0] for o in outcomes for f in o.faults]
    kinds = {k: faults.count(k) for k in sorted(set(faults))}
    bad = [o for o in outcomes if o.problems]
    stuck = [o for o in outcomes if o.harness]
    spans = sorted(o.seconds for o in outcomes) or [0.0]
    lines = [f"{len(outcomes)} trials, {runs} refund runs, faults {kinds}: "
             f"{sum(len(o.problems) for o in bad)} violations, "
             f"{sum(len(o.stuck) for o in outcomes)} runs stuck with nothing pending, "
             f"{sum(len(o.harness) for o in stuck)} harness errors; a trial took "
             f"{spans[0]:.0f}-{spans[-1]:.0f} s (median {spans[len(spans) // 2]:.0f} s)"]
    refused = Counter(code for o in outcomes for code in o.refused)
    lines.append(f"  the approvers' refused decisions, by code: {dict(refused)}")
    lines += [f"  trial {o.trial} ({o.invoice}; {', '.join(o.faults)}): {p}"
              for o in bad for p in o.problems]
    lines += [f"  trial {o.trial} ({o.invoice}) harness: {h}" for o in stuck for h in o.harness]
    lines += [f"  trial {o.trial}: its runs' histories are in {o.evidence}"
              for o in outcomes if o.evidence is not None]
    return "\n".join(lines)

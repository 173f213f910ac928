"""The faults a trial throws at the money path: the tools' database locked for a span around
the payment tool's timeout, a worker SIGKILLed and restarted."""

from __future__ import annotations

import asyncio
import random

from .bounds import HarnessStuck
from .store import database_locked
from .world import Notes, World

# Around the checker worker's 2 s tool timeout and its give-up after 2 attempts (worker.py,
# about 4 s with the backoff), starting while the trial's first runs near their payment.
LOCK_SPAN = (1.0, 8.0)
LOCK_DELAY = (0.0, 4.0)


async def lock_database(world: World, rng: random.Random, notes: Notes) -> None:
    span = rng.uniform(*LOCK_SPAN)
    await asyncio.sleep(rng.uniform(*LOCK_DELAY))
    async with database_locked(world) as held:
        if held:  # (if not, another trial's lock fault is this trial's too)
            notes.faults.append(f"db locked {span:.1f}s")
            await asyncio.sleep(span)


async def kill_worker(world: World, rng: random.Random, notes: Notes) -> None:
    await asyncio.sleep(rng.uniform(0, 3))
    alive = [w for w in world.workers if w.alive()]  # another trial's victim is down already
    if not alive:
        return
    victim = rng.choice(alive)
    victim.kill9()  # waits (bounded) for the process to be gone
    notes.faults.append("worker SIGKILL")
    try:
        await asyncio.sleep(rng.uniform(0, 1))
    finally:  # even when the trial ends meanwhile: never leave a worker dead, never two
        if not victim.alive():
            victim.start()


FAULTS = (lock_database, kill_worker)


async def fault(world: World, rng: random.Random, notes: Notes) -> None:
    try:
        await rng.choice(FAULTS)(world, rng, notes)
    except HarnessStuck as stuck:
        notes.harness.append(str(stuck))

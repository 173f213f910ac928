"""The faults a trial throws at the money path: the tools' database locked for a span around
the payment tool's timeout, a worker SIGKILLed and restarted."""

from __future__ import annotations

import asyncio
import random
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from procs import WorkerProcess

from .bounds import RPC_SECONDS, HarnessStuck, bounded
from .world import Notes, World

# Around the checker worker's 2 s tool timeout and its give-up after 2 attempts (worker.py,
# about 4 s with the backoff), starting while the trial's first runs near their payment.
LOCK_SPAN = (1.0, 8.0)
LOCK_DELAY = (0.0, 4.0)
LOCK_WAIT = 1.0


async def _take_lock(db: sqlite3.Connection, seconds: float) -> bool:
    """The write lock within ``seconds`` (a worker's transaction lasts milliseconds), or not
    at all: another trial's lock fault holds it, and faults must not queue back to back (the
    database would stay locked for minutes). No busy wait inside SQLite: it would block the
    event loop, where another fault's holder must wake to let go."""
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        try:
            db.execute("BEGIN IMMEDIATE")
            return True
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.02)


@asynccontextmanager
async def database_locked(world: World) -> AsyncIterator[bool]:
    """Hold the tools' database's write lock inside the block (True), unless another fault
    holds it already (False)."""
    holder = sqlite3.connect(world.db_path, timeout=0, isolation_level=None)
    try:
        yield await bounded("taking the tools' database lock", LOCK_WAIT + RPC_SECONDS,
                            _take_lock(holder, LOCK_WAIT))
    finally:
        holder.close()  # rolls the open transaction back: the lock is free


async def lock_database(world: World, rng: random.Random, notes: Notes) -> None:
    span = rng.uniform(*LOCK_SPAN)
    await asyncio.sleep(rng.uniform(*LOCK_DELAY))
    async with database_locked(world) as held:
        if held:  # (if not, another trial's lock fault is this trial's too)
            notes.faults.append(f"db locked {span:.1f}s")
            await asyncio.sleep(span)


def _alive(worker: WorkerProcess) -> bool:
    return worker.proc is not None and worker.proc.poll() is None


async def kill_worker(world: World, rng: random.Random, notes: Notes) -> None:
    await asyncio.sleep(rng.uniform(0, 3))
    alive = [w for w in world.workers if _alive(w)]  # another trial's victim is down already
    if not alive:
        return
    victim = rng.choice(alive)
    victim.kill9()  # waits (bounded) for the process to be gone
    notes.faults.append("worker SIGKILL")
    try:
        await asyncio.sleep(rng.uniform(0, 1))
    finally:  # even when the trial ends meanwhile: never leave a worker dead, never two
        if not _alive(victim):
            victim.start()


FAULTS = (lock_database, kill_worker)


async def fault(world: World, rng: random.Random, notes: Notes) -> None:
    try:
        await rng.choice(FAULTS)(world, rng, notes)
    except HarnessStuck as stuck:
        notes.harness.append(str(stuck))

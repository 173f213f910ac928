"""Kills at the points of an effect: a trial arms, for its invoice, a SIGKILL of the worker
that reaches a point of ``issue_refund``'s effect first (the checker's worker honours it:
worker.py), and restarts that worker once it is dead. The points, in order:

- ``before-claim``: the activity began, no transaction yet;
- ``holding-lock``: inside the effect's transaction, the key claimed, under the lock;
- ``after-write``: the refund written, Tower's record of it not yet;
- ``before-commit``: the claim, the refund and the record made, not committed;
- ``before-result``: committed, the activity's result not yet recorded by Temporal.
"""

from __future__ import annotations

import asyncio
import random
import time

from .worker import fired_name
from .world import ForkedWorker, Notes, World

POINTS = ("before-claim", "holding-lock", "after-write", "before-commit", "before-result")
PID_SECONDS = 2.0  # for a worker that took a kill to write its pid (it then dies at once)


def arm(world: World, number: int, invoice: str, rng: random.Random) -> list[str]:
    """Arm kills for trial ``number``'s invoice: at the points in turn (so that a few trials
    meet each) and at a random other one half the time; the points."""
    assert world.kills is not None
    points = [POINTS[number % len(POINTS)]]
    if rng.random() < 0.5:
        points.append(rng.choice([p for p in POINTS if p not in points]))
    for point in points:
        (world.kills / f"{invoice}.{point}").touch()
    return points


async def restart_killed(world: World, invoice: str, points: list[str], notes: Notes) -> None:
    """Until cancelled: each armed kill that fired is noted and its worker restarted; on the
    way out the kills not taken are disarmed (and one taken meanwhile is handled too)."""
    assert world.kills is not None
    waiting = list(points)
    try:
        while waiting:
            waiting = [p for p in waiting if not _handled(world, invoice, p, notes)]
            await asyncio.sleep(0.1)
    finally:
        for point in waiting:
            armed = world.kills / f"{invoice}.{point}"
            armed.unlink(missing_ok=True)
            _handled(world, invoice, point, notes)  # taken before it could be disarmed


def _handled(world: World, invoice: str, point: str, notes: Notes) -> bool:
    assert world.kills is not None
    fired = fired_name(world.kills / f"{invoice}.{point}")
    if not fired.exists():
        return False
    deadline = time.monotonic() + PID_SECONDS
    while not (pid := fired.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.01)
    notes.faults.append(f"effect-kill at {point}")
    victim = next((w for w in world.workers if str(w.pid) == pid), None)
    if victim is not None:
        _restart(victim)
    return True


def _restart(worker: ForkedWorker) -> None:
    worker.wait(timeout=10)  # it killed itself: gone at once
    worker.start()

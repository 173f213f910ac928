"""How a side effect commits: once per key, with its invariants, never after give-up.

One SQLite transaction (``BEGIN IMMEDIATE``: the write lock is taken before anything is
read) holds, in order:

1. the idempotency record: the same key returns the first result;
2. the fence: an attempt makes the effect only while it still owns its key. Every
   attempt, and the reconciling read, claims the key with its *epoch* (when Temporal
   scheduled it); an attempt that finds a later epoch was given up on (a zombie) and
   rolls back;
3. the tool's guard (its invariants: amounts, balances, limits, approvals);
4. the effect and its idempotency record.

While it waits for the lock an attempt heartbeats, and it stops by itself before its
start-to-close deadline, so a slow lock is a retryable failure, not a zombie.
"""

from __future__ import annotations

import json
import sqlite3
import time
from datetime import datetime, timedelta
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

FENCES = """
CREATE TABLE IF NOT EXISTS effect_fences (
    idempotency_key TEXT PRIMARY KEY, epoch INTEGER NOT NULL);
"""
LOCK_POLL_MS = 200  # how long one BEGIN waits before the attempt heartbeats again
MARGIN = timedelta(seconds=1)  # stop this long before the start-to-close deadline (at most)


def epoch_now() -> int:
    """This attempt's epoch: when Temporal scheduled it (µs), so a later attempt (a retry,
    the reconciling read, a reset's re-run) always has a larger one. Outside an activity
    (a unit test) the wall clock stands in."""
    if activity.in_activity():
        return _micros(activity.info().current_attempt_scheduled_time)
    return time.time_ns() // 1000


def begin_immediate(db: sqlite3.Connection) -> None:
    """Take the write lock, heartbeating while another writer holds it."""
    db.execute(f"PRAGMA busy_timeout={LOCK_POLL_MS}")
    deadline = _deadline()
    while True:
        try:
            db.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
        if activity.in_activity():
            activity.heartbeat("waiting for the tools' database lock")
            if activity.is_cancelled():
                raise ApplicationError("cancelled while waiting for the database lock",
                                       type="ToolBusy")
        if deadline is not None and datetime.now(deadline.tzinfo) >= deadline:
            raise ApplicationError("the tools' database stayed locked until this attempt's "
                                   "deadline; nothing was done", type="ToolBusy")


def claim(db: sqlite3.Connection, key: str, epoch: int) -> None:
    """Own ``key`` for this epoch, or fail if a later attempt owns it. Inside the
    transaction: the check and the claim are atomic with the effect."""
    row = db.execute("SELECT epoch FROM effect_fences WHERE idempotency_key=?",
                     (key,)).fetchone()
    if row is not None and row[0] > epoch:
        raise ApplicationError(
            f"fenced off: a later attempt (or the run's reconciliation) owns {key}; this "
            "attempt was given up on and changes nothing", type="FencedOff",
            non_retryable=True)
    db.execute("INSERT INTO effect_fences VALUES (?, ?) ON CONFLICT(idempotency_key) "
               "DO UPDATE SET epoch=excluded.epoch", (key, epoch))


def reconcile(db: sqlite3.Connection, key: str, epoch: int) -> dict[str, Any] | None:
    """The effect made under ``key``, if any, after fencing off every earlier attempt:
    once this returns None, no attempt given up on can commit it any more."""
    begin_immediate(db)
    try:
        claim(db, key, epoch)
        row = db.execute("SELECT result FROM effects WHERE idempotency_key=?",
                         (key,)).fetchone()
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return None if row is None else dict(json.loads(row[0]))


def _deadline() -> datetime | None:
    if not activity.in_activity():
        return None
    info = activity.info()
    if info.start_to_close_timeout is None:
        return None
    timeout = info.start_to_close_timeout
    return info.started_time + timeout - min(MARGIN, timeout / 5)


def _micros(at: datetime) -> int:
    return int(at.timestamp() * 1_000_000)

"""The bookkeeping of effects, in the transaction of the effect itself (any backend):
one row per key in ``tower_effects`` (the owning attempt's epoch, then the tool, its
arguments and its result), in SQL that SQLite and PostgreSQL both take.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta
from typing import Any, Protocol

from temporalio import activity

from tower.contract.failures import Code, TowerError, failure

TABLE = """CREATE TABLE IF NOT EXISTS tower_effects (
    idempotency_key TEXT PRIMARY KEY, epoch BIGINT NOT NULL, tool TEXT, arguments TEXT,
    result TEXT)"""


class Cursor(Protocol):
    def fetchone(self) -> Any: ...

    def fetchall(self) -> Any: ...


class Tx(Protocol):
    """An open write transaction (``?`` placeholders on every backend)."""

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> Cursor: ...


def claim(tx: Tx, key: str, epoch: int, for_update: str = "") -> dict[str, Any] | None:
    """Own ``key`` for ``epoch`` inside ``tx``; the result of the effect made under it, if
    any (the key alone decides). An attempt that finds a later epoch was given up on: it
    fails, non-retryable, and changes nothing."""
    tx.execute("INSERT INTO tower_effects (idempotency_key, epoch) VALUES (?, ?) "
               "ON CONFLICT (idempotency_key) DO NOTHING", (key, epoch))
    owner, result = tx.execute(
        "SELECT epoch, result FROM tower_effects WHERE idempotency_key=?" + for_update,
        (key,)).fetchone()
    if result is not None:
        return dict(json.loads(result))
    if int(owner) > epoch:
        raise failure(TowerError(
            f"fenced off: a later attempt (or the run's reconciliation) owns {key}; this "
            "attempt was given up on and changes nothing", code=Code.FENCED_OFF))
    tx.execute("UPDATE tower_effects SET epoch=? WHERE idempotency_key=?", (epoch, key))
    return None


def record(tx: Tx, key: str, tool: str | None, arguments: str | None,
           result: dict[str, Any]) -> None:
    tx.execute("UPDATE tower_effects SET tool=?, arguments=?, result=? WHERE idempotency_key=?",
               (tool, arguments, json.dumps(result, sort_keys=True), key))


def epoch_now() -> int:
    """This attempt's epoch: when Temporal scheduled it (µs), so a later attempt always has
    a larger one; outside an activity (a unit test) the wall clock."""
    if activity.in_activity():
        return int(activity.info().current_attempt_scheduled_time.timestamp() * 1_000_000)
    return time.time_ns() // 1000


def waited(what: str) -> None:
    """Between two tries for the lock: heartbeat, and stop when cancelled or near this
    attempt's deadline (a slow lock is a retryable failure, never a zombie that commits after
    the run gave up on it)."""
    if not activity.in_activity():
        return
    activity.heartbeat(what)
    if activity.is_cancelled():
        raise failure(TowerError(f"cancelled while {what}", code=Code.TOOL_BUSY))
    info = activity.info()
    timeout = info.start_to_close_timeout
    if timeout is None:
        return
    deadline = info.started_time + timeout - min(timedelta(seconds=1), timeout / 5)
    if datetime.now(deadline.tzinfo) >= deadline:
        raise failure(TowerError(f"still {what} at this attempt's deadline; nothing was done",
                                 code=Code.TOOL_BUSY))

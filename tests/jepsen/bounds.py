"""Every wait of the checker's harness has a bound: a step that cannot finish in its budget
becomes a harness error naming what it waited for — never a silent hang, never a pass.

Why not ``asyncio.timeout`` alone: temporalio's update calls turn the CancelledError a
timeout delivers into ``WorkflowUpdateRPCTimeoutOrCancelledError``, so a caller that handles
that error (the approver did: "no answer, look again") swallows the cancellation and never
stops. ``bounded`` runs the step as its own task and stops *waiting* at the bound, whatever
the step does with the cancellation.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from temporalio.client import RPCTimeoutOrCancelledError
from temporalio.service import RPCError

T = TypeVar("T")

RPC_SECONDS = 30.0  # one call to the server (a query, a describe, an update, a reset)
# One harness statement on the tools' database: tried again (each try with a busy timeout)
# while lock faults hold it, one after another, for up to this long.
DB_SECONDS = 120.0
DB_BUSY_SECONDS = 10.0
STOP_SECONDS = 30.0  # the trial's own tasks (approvers, faults) to end once cancelled
RETRY_PAUSE = 0.5  # before asking the server again


class HarnessStuck(Exception):
    """The harness, not the code under test, could not finish a step in its budget."""


def _consume(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # abandoned: its late failure is not "never retrieved"


async def bounded(what: str, seconds: float, step: Awaitable[T]) -> T:
    """``await step``, or raise ``HarnessStuck(what)`` once ``seconds`` have passed."""
    task = asyncio.ensure_future(step)
    try:
        done, _ = await asyncio.wait({task}, timeout=seconds)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if not done:
        task.cancel()  # asked to stop; not awaited, since it may ignore the request
        task.add_done_callback(_consume)
        raise HarnessStuck(f"{what}: no answer in {seconds:.0f} s")
    return task.result()


async def stop_all(what: str, tasks: list[asyncio.Task[None]],
                   seconds: float = STOP_SECONDS) -> list[str]:
    """Cancel ``tasks`` and wait (bounded) for them to end: the ones that did not, and the
    ones that had ended with an error before (an approver that stopped answering would leave
    its run waiting), are named, as harness errors."""
    failed = [f"{what} {task.get_name()} failed: {type(exc).__name__}: {exc}"[:500]
              for task in tasks if task.done() and not task.cancelled()
              and (exc := task.exception()) is not None]
    for task in tasks:
        task.cancel()
    if not tasks:
        return []
    done, pending = await asyncio.wait(tasks, timeout=seconds)
    for task in done:
        _consume(task)
    for task in pending:
        task.add_done_callback(_consume)
    return failed + [f"{what} {task.get_name()} still running {seconds:.0f} s after it was "
                     "cancelled" for task in pending]


async def persist(what: str, seconds: float, call: Callable[[], Awaitable[T]]) -> T:
    """``await call()`` again while the server answers with an error (a query or an update
    to a run whose worker was just SIGKILLed fails: "context canceled", "query timed out
    before a worker could process it"), until ``seconds`` have passed: then HarnessStuck
    with the last error. ``call`` must be safe to repeat."""
    async def again() -> T:
        last: Exception | None = None
        while True:
            try:
                return await call()
            except (RPCError, RPCTimeoutOrCancelledError) as exc:
                if (task := asyncio.current_task()) is not None and task.cancelling():
                    raise asyncio.CancelledError from None  # see the module's docstring
                last = exc
                failures.append(f"{type(last).__name__}: {last}")
            await asyncio.sleep(RETRY_PAUSE)

    failures: list[str] = []
    try:
        return await bounded(what, seconds, again())
    except HarnessStuck as stuck:
        raise HarnessStuck(f"{stuck}; last error: {failures[-1] if failures else 'none'}"
                           ) from None


def on_db(db_path: Path, work: Callable[[sqlite3.Connection], T]) -> Awaitable[T]:
    """``work`` on its own connection (with a busy timeout) in a thread: a harness statement
    waiting for a lock never blocks the event loop, where the lock's holder may be. Lock
    faults can follow one another (a holder polling for the lock wins it before SQLite's
    busy handler wakes): the statement is tried again until DB_SECONDS are nearly spent."""
    def run() -> T:
        deadline = time.monotonic() + DB_SECONDS - 2 * DB_BUSY_SECONDS
        while True:
            db = sqlite3.connect(db_path, timeout=DB_BUSY_SECONDS)
            try:
                with db:
                    return work(db)
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
            finally:
                db.close()
    return asyncio.to_thread(run)

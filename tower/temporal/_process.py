"""Run a worker process's ``main`` to the end, then exit without interpreter teardown.

A worker's client and worker live on the SDK's Rust runtime, whose threads call back into
Python. When the interpreter finalizes while one of them still does (a connection closing,
a log line forwarded), the process aborts: ``Fatal Python error: PyGILState_Release ...
finalizing``, exit 134, after a drain that went well (2 of 9 SIGTERMs before this). So the
worker's shutdown is awaited in ``main`` (``async with worker``), then the process flushes
what it wrote and ends with ``os._exit``: nothing runs after the drain but the flushes.
The `tower` command line ends the same way (tower/cli/cli.py ``entry``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import traceback
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, NoReturn

from tower.contract.failures import TowerError

if TYPE_CHECKING:
    from temporalio.worker import Worker

__all__ = ["exit_code", "flush_and_exit", "run_main", "serve", "stop_on_signals"]


def run_main(main: Coroutine[Any, Any, Any]) -> NoReturn:
    """``asyncio.run(main)`` for a worker, then exit: 0, SystemExit's code (its message
    printed), 130 on Ctrl-C before the worker took the signal over, 1 on an error."""
    # Not asyncio.run: closing the loop while the runtime still holds callbacks on it can
    # abort the process too. The loop is left to os._exit.
    loop = asyncio.new_event_loop()
    try:
        code = exit_code(loop.run_until_complete(main))
    except BaseException as exc:  # noqa: BLE001 - every ending becomes an exit code
        code = _failed(exc)
    flush_and_exit(code)


def stop_on_signals() -> asyncio.Event:
    """An event SIGINT or SIGTERM sets (Ctrl-C, ``kill``, ``docker stop``, Kubernetes): from
    the call on, either one is a clean stop, not the process killed mid-step."""
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    return stop


async def serve(worker: Worker, *, stop: asyncio.Event | None = None) -> None:
    """Run ``worker`` until SIGINT or SIGTERM (or ``stop`` is set), then stop polling and let
    its running activities finish within its ``graceful_shutdown_timeout``. Once it polls,
    prints ``worker ready on task queue 'QUEUE'`` (what `tower.testing.live` waits for).

    Example::

        run_main(serve(Worker(await connect(), task_queue="q", workflows=[MyAgent])))
    """
    stop = stop or stop_on_signals()
    async with worker:
        print(f"worker ready on task queue {worker.config()['task_queue']!r}", flush=True)
        await stop.wait()


def exit_code(result: Any) -> int:
    return result if isinstance(result, int) else 0


def _failed(exc: BaseException) -> int:
    if isinstance(exc, SystemExit):
        if isinstance(exc.code, int) or exc.code is None:
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    if isinstance(exc, KeyboardInterrupt):
        return 130
    if _explained(exc):  # its message says what is wrong and what to do: one line
        print(f"error: {exc}", file=sys.stderr)
        return 1
    traceback.print_exception(exc)
    return 1


def _explained(exc: BaseException) -> bool:
    """Tower's own errors (a server that does not answer, a worker missing a tool): their
    message says what to do."""
    return isinstance(exc, TowerError)


def flush_and_exit(code: int) -> NoReturn:
    """Flush logs, traces and the standard streams, then ``os._exit(code)``."""
    logging.shutdown()
    if "opentelemetry" in sys.modules:  # os._exit skips atexit, where exporters flush
        from opentelemetry import trace

        flush = getattr(trace.get_tracer_provider(), "force_flush", None)
        if flush is not None:
            flush()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BrokenPipeError, ValueError):  # a reader gone, a closed stream
            stream.flush()
    os._exit(code)

"""A worker process: its heap kept out of the collector's way while it runs, and its end.

``frozen_heap``: one workflow task can hold a thousand signals (the servers' per-run cap,
tower/temporal/_gate.py); applying them set off full collections that rescan the whole
heap, which in a process that loaded a lot pushed the task past the SDK's 2 s deadlock
detector on every retry. Objects frozen with ``gc.freeze`` are skipped by those passes.

``code_version``: the worker's build id, what the SDK would derive by unmarshalling (or,
for a checkout that has no bytecode cache, compiling) every loaded module again: a third of
a worker's start-up CPU. A digest of their sources tells the same code apart as well.

``run_main``: the SDK's Rust runtime calls back into Python from its threads; an interpreter
finalizing meanwhile aborts the process (exit 134, after a drain that went well). So the
worker's shutdown is awaited in ``main``, then the process flushes and ends with
``os._exit`` (``flush_and_exit``, the `tower` command line's end too).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import hashlib
import logging
import os
import signal
import sys
import traceback
from collections.abc import AsyncIterator, Coroutine
from importlib.machinery import SourceFileLoader
from typing import TYPE_CHECKING, Any, NoReturn

from tower.contract.failures import TowerError

if TYPE_CHECKING:
    from temporalio.worker import Worker

__all__ = ["code_version", "exit_code", "flush_and_exit", "frozen_heap", "run_main", "serve",
           "stop_on_signals"]

_running = 0  # workers and replayers running in this process
_collected = False  # the process's first freeze collected its garbage first


@functools.cache
def code_version() -> str:
    """A digest of the source of every module loaded from a .py file when a worker is first
    made in this process (as the SDK's default build id is taken then, once)."""
    digest = hashlib.md5(usedforsecurity=False)
    for name in sorted(sys.modules):
        spec = getattr(sys.modules[name], "__spec__", None)
        if spec is None or not isinstance(spec.loader, SourceFileLoader):
            continue
        with contextlib.suppress(OSError):
            digest.update(spec.loader.get_data(spec.origin))
    return digest.hexdigest()


@contextlib.asynccontextmanager
async def frozen_heap() -> AsyncIterator[None]:
    """Freeze the heap while any of this process's workers runs; unfreeze it after the last
    (so a process that runs many in turn, a test suite, frees what they left)."""
    global _running, _collected
    if _running == 0:
        if not _collected:
            # Only the first freeze pays a full pass (~55 ms in a replaying process): what
            # garbage a later one freezes is released with the rest after the last stops.
            gc.collect()
            _collected = True
        gc.freeze()
    _running += 1
    try:
        yield
    finally:
        _running -= 1
        if _running == 0:
            gc.unfreeze()


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
    if isinstance(exc, TowerError):  # its message says what is wrong and what to do
        print(f"error: {exc}", file=sys.stderr)
    else:
        traceback.print_exception(exc)
    return 1


def flush_and_exit(code: int) -> NoReturn:
    """Flush logs, traces and the standard streams, then ``os._exit(code)``."""
    logging.shutdown()
    if "opentelemetry" in sys.modules:  # os._exit skips atexit, where exporters flush
        from opentelemetry import trace

        flush = getattr(trace.get_tracer_provider(), "force_flush", None)
        if flush is not None:
            flush()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:  # a reader gone: what it was sent did not all arrive
            code = code or 1
        except ValueError:  # a closed stream
            pass
    os._exit(code)

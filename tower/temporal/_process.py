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
import sys
import traceback
from collections.abc import Coroutine
from typing import Any, NoReturn

__all__ = ["exit_code", "flush_and_exit", "run_main"]


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
        with contextlib.suppress(BrokenPipeError, ValueError):  # a reader gone, a closed stream
            stream.flush()
    os._exit(code)

"""Follow a run live: each transition as a line, and a progress line (step, node, status,
elapsed) redrawn in place on a terminal; JSON Lines instead with ``--json``.

Used by `tower run` (follows by default) and `tower watch RUN`.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TextIO

from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from starter.common import CliError, describe, not_found_is
from tower import Transition

# DONE/FAILED from the run itself; the others from the server when no worker can answer.
ENDED = {"DONE", "FAILED", "COMPLETED", "TERMINATED", "CANCELED", "TIMED_OUT", "CONTINUED_AS_NEW"}
PAUSED = "AWAITING_APPROVAL"


@dataclass
class Progress:
    """What the progress line shows; pure so it is tested without a terminal."""

    run: str
    step: int = 0
    node: str = "START"
    status: str = "STARTING"
    started: datetime | None = None
    seen: int = 0
    transitions: list[Transition] = field(default_factory=list)

    def line(self, now: datetime) -> str:
        elapsed = (now - self.started).total_seconds() if self.started else 0.0
        return (f"[{self.run}] step {self.step} · {self.node} · {self.status} · "
                f"{format_elapsed(elapsed)}")


def format_elapsed(seconds: float) -> str:
    minutes, secs = divmod(max(seconds, 0.0), 60)
    hours, minutes = divmod(int(minutes), 60)
    return f"{hours}:{minutes:02d}:{secs:04.1f}" if hours else f"{minutes:02d}:{secs:04.1f}"


def transition_json(run: str, t: Transition) -> dict[str, Any]:
    return {"event": "transition", "run": run, **t.model_dump(mode="json")}


async def watch(
    handle: WorkflowHandle[Any, Any], *, as_json: bool = False, out: TextIO | None = None,
    stop_at_pause: bool = True, poll_seconds: float = 0.25, timeout: float | None = None,
) -> Progress:
    """Show the run's transitions as they happen until it ends (or pauses at a gate, if
    ``stop_at_pause``); return the last progress. ``timeout`` bounds the wait (seconds)."""
    out = out or sys.stdout
    tty = not as_json and out.isatty()
    info = await _describe(handle)
    progress = Progress(run=handle.id, started=info.start_time)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout if timeout is not None else None
    while True:
        log, status = await _poll(handle, info.status)
        for t in log[progress.seen:]:
            if tty:
                out.write("\r\x1b[K")
            out.write((json.dumps(transition_json(handle.id, t)) if as_json else describe(t))
                      + "\n")
            progress.transitions.append(t)
        progress.seen = len(log)
        if log:
            progress.step, progress.node = log[-1].step, log[-1].target
        progress.status = status
        ended = status in ENDED or (stop_at_pause and status == PAUSED)
        if tty:
            out.write("\r\x1b[K" + progress.line(datetime.now(UTC)) + ("\n" if ended else ""))
        elif ended and not as_json:
            out.write(progress.line(datetime.now(UTC)) + "\n")
        out.flush()
        if ended:
            return progress
        if deadline is not None and loop.time() > deadline:
            raise CliError(f"run {handle.id!r} still {status} after {timeout:g}s")
        await asyncio.sleep(poll_seconds)


async def _describe(handle: WorkflowHandle[Any, Any]) -> Any:
    with not_found_is(f"run {handle.id!r} not found"):
        return await handle.describe()


async def _poll(
    handle: WorkflowHandle[Any, Any], first: WorkflowExecutionStatus | None
) -> tuple[list[Transition], str]:
    try:
        log = await handle.query("transitions", result_type=list[Transition])
        status = await handle.query("status", result_type=str)
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise CliError(f"run {handle.id!r} not found") from None
        # A closed run with no worker to answer queries: its status is all we can say.
        info = await handle.describe()
        if info.status not in (None, WorkflowExecutionStatus.RUNNING):
            return [], info.status.name
        raise
    return log, status

"""Follow a run live: each transition as a line, and a progress line (step, node, status,
elapsed) redrawn in place on a terminal (rich's Live display); JSON Lines with ``--json``.

Used by `tower run` (follows by default), `tower watch RUN`, and every command that
follows a run after acting on it (approve, retry, the demo).

Each poll reads the run's status *before* its transition log: a log read after the
status holds every move up to that status, so the last transitions of a run that ends
while it is followed (``→ DONE``) are always printed before the follower stops.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TextIO

from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from tower import Transition
from tower.cli.common import CliError, describe, not_found_is

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
    # The run is RUNNING but waits for something from outside (a signal or an update):
    # no workflow task, no activity, no child is pending.
    idle: bool = False

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


class _Screen:
    """Where transitions go: plain lines, JSON Lines, or lines above a live progress line."""

    def __init__(self, out: TextIO, as_json: bool, show: Callable[[Transition], str] | None):
        self.out, self.as_json = out, as_json
        self.show = show or describe
        self.live: Any = None
        if not as_json and out.isatty():
            from rich.console import Console
            from rich.live import Live
            from rich.text import Text

            self._text = Text
            self.live = Live(Text(""), console=Console(file=out, highlight=False),
                             auto_refresh=False, transient=True)
            self.live.start()

    def transition(self, run: str, t: Transition) -> None:
        if self.as_json:
            self.out.write(json.dumps(transition_json(run, t)) + "\n")
        elif self.live is not None:
            self.live.console.print(self._text(self.show(t)))
        else:
            self.out.write(self.show(t) + "\n")

    def progress(self, line: str, *, last: bool) -> None:
        if self.live is not None:
            self.live.update(self._text(line), refresh=True)
            if last:
                self.live.stop()
                self.out.write(line + "\n")
        elif last and not self.as_json:
            self.out.write(line + "\n")
        self.out.flush()

    def close(self) -> None:
        if self.live is not None and self.live.is_started:
            self.live.stop()


async def watch(
    handle: WorkflowHandle[Any, Any], *, as_json: bool = False, out: TextIO | None = None,
    stop_at_pause: bool = True, stop_when_idle: bool = False, poll_seconds: float = 0.25,
    timeout: float | None = None, skip: int = 0, progress_line: bool = True,
    show: Callable[[Transition], str] | None = None,
) -> Progress:
    """Show the run's transitions as they happen until it ends (or pauses at a gate, if
    ``stop_at_pause``; or waits for outside input, if ``stop_when_idle``); return the last
    progress. ``skip`` transitions already shown are not printed again; ``timeout``
    bounds the wait (seconds)."""
    screen = _Screen(out or sys.stdout, as_json, show)
    try:
        return await _follow(handle, screen, stop_at_pause, stop_when_idle, poll_seconds,
                             timeout, skip, progress_line)
    finally:
        screen.close()


async def _follow(handle: WorkflowHandle[Any, Any], screen: _Screen, stop_at_pause: bool,
                  stop_when_idle: bool, poll_seconds: float, timeout: float | None, skip: int,
                  progress_line: bool) -> Progress:
    info = await _describe(handle)
    progress = Progress(run=handle.id, started=info.start_time, seen=skip)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout if timeout is not None else None
    while True:
        polled = await poll(handle)
        if polled is None:  # no answer this time: the run is still going
            _check_deadline(handle, deadline, loop.time(), progress.status, timeout)
            await asyncio.sleep(poll_seconds)
            continue
        status, log = polled
        for t in log[progress.seen:]:
            screen.transition(handle.id, t)
            progress.transitions.append(t)
        moved = len(log) > progress.seen
        progress.seen = max(progress.seen, len(log))
        if log:
            progress.step, progress.node = log[-1].step, log[-1].target
        progress.status = status
        progress.idle = (stop_when_idle and status == "RUNNING" and not moved
                         and await waits_for_outside(handle))
        ended = status in ENDED or (stop_at_pause and status == PAUSED) or progress.idle
        if progress_line:
            screen.progress(progress.line(datetime.now(UTC)), last=ended)
        if ended:
            return progress
        _check_deadline(handle, deadline, loop.time(), status, timeout)
        await asyncio.sleep(poll_seconds)


def _check_deadline(handle: WorkflowHandle[Any, Any], deadline: float | None, now: float,
                    status: str, timeout: float | None) -> None:
    if deadline is not None and timeout is not None and now > deadline:
        raise CliError(f"run {handle.id!r} still {status} after {timeout:g}s")


async def _describe(handle: WorkflowHandle[Any, Any]) -> Any:
    with not_found_is(f"run {handle.id!r} not found"):
        return await handle.describe()


async def poll(handle: WorkflowHandle[Any, Any]) -> tuple[str, list[Transition]] | None:
    """The run's status, then its transition log (in that order: see the module doc);
    None when no worker answered this time (ask again)."""
    try:
        status = await handle.query("status", result_type=str)
        log = await handle.query("transitions", result_type=list[Transition])
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise CliError(f"run {handle.id!r} not found") from None
        info = await handle.describe()
        if info.status in (None, WorkflowExecutionStatus.RUNNING):
            return None
        return await _closed(handle, info.status.name)
    return status, log


async def _closed(handle: WorkflowHandle[Any, Any], status: str) -> tuple[str, list[Transition]]:
    """A closed run no worker answers for: its log from its history, replayed here."""
    from tower.cli.connection import connect_config
    from tower.cli.histories import replay

    history = await handle.fetch_history()
    namespace = connect_config().get("namespace") or "default"
    [result] = await replay([(handle.id, history)], namespace=namespace)
    if result.failure or not result.states:
        return status, []
    return result.states[-1].status.value, result.log


async def waits_for_outside(handle: WorkflowHandle[Any, Any]) -> bool:
    """True when nothing inside the run is pending: it waits for a signal or an update."""
    raw = (await handle.describe()).raw_description
    return (not raw.HasField("pending_workflow_task") and not raw.pending_activities
            and not raw.pending_children and not raw.pending_nexus_operations)


async def follow(handle: WorkflowHandle[Any, Any], *, skip: int = 0,
                 out: TextIO | None = None) -> str:
    """Print each transition (after the first ``skip``) to ``out`` (stdout) until the run
    ends or pauses at a gate; the status it stopped at."""
    return (await watch(handle, skip=skip, out=out, progress_line=False)).status

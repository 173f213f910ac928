"""Follow a run live: each transition as a line, and a progress line (step, node, status,
elapsed) redrawn in place on a terminal; JSON Lines with ``--json``. What is followed, and
when following ends, is the client's (``tower.client.follow``)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TextIO

from temporalio.client import WorkflowHandle

from tower.cli.common import describe
from tower.cli.streaming import RUN_KINDS, LiveText, Region, StreamPump
from tower.client._follow import PAUSED, Position
from tower.core.engine import Transition

__all__ = ["PAUSED", "Progress", "follow", "format_elapsed", "transition_json", "watch"]


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
    closed: bool = False  # the run's execution ended
    reason: str | None = None  # why a closed run did not complete

    @property
    def failed(self) -> bool:
        return self.closed and self.status != "DONE"

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


class _Screen(Region):
    """Where transitions go: plain lines, JSON Lines, or lines above a live progress line."""

    def __init__(self, out: TextIO, as_json: bool, show: Callable[[Transition], str] | None):
        super().__init__(out, live=not as_json)
        self.as_json, self.show = as_json, show or describe
        self._line = ""
        self._reply = ""  # the model's text as it forms, under the progress line

    def reply(self, text: str) -> None:
        self._reply = text
        self._draw()

    def _draw(self) -> None:
        # The last few lines of the reply so far: the region stays small.
        tail = "\n".join(self._reply.splitlines()[-6:])
        self.draw(self._line + (f"\n{tail}" if tail else ""))

    def transition(self, run: str, t: Transition) -> None:
        if self.as_json:
            self.out.write(json.dumps(transition_json(run, t)) + "\n")
        else:
            self._reply = ""  # a move: the text shown so far was that node's
            self.line(self.show(t))

    def progress(self, line: str, *, last: bool) -> None:
        self._line = line
        if self.live is not None and not last:
            self._draw()
        elif self.live is not None:
            self.live.stop()
            self.out.write(line + "\n")
        elif last and not self.as_json:
            self.out.write(line + "\n")
        self.out.flush()


async def watch(
    handle: WorkflowHandle[Any, Any], *, as_json: bool = False, out: TextIO | None = None,
    stop_at_pause: bool = True, stop_when_idle: bool = False, poll_seconds: float = 0.25,
    timeout: float | None = None, skip: int = 0, progress_line: bool = True,
    show: Callable[[Transition], str] | None = None, client: Any = None,
) -> Progress:
    """Show the run's transitions as they happen until it ends (or pauses at a gate, if
    ``stop_at_pause``; or waits for outside input, if ``stop_when_idle``); return the last
    progress. ``skip`` transitions already shown are not printed again; ``timeout``
    bounds the wait (seconds). With ``client``, the model's text from the run's live stream
    shows as it forms (under the progress line; its events as JSON lines with --json)."""
    from tower.cli.agents import agents
    from tower.client import RunEnd, follow
    from tower.client._runs import describe as describe_run

    screen = _Screen(out or sys.stdout, as_json, show)
    pump = None
    if client is not None:
        pump = await StreamPump(client, handle.id, LiveText(
            screen.out, handle.id, as_json, kinds=RUN_KINDS,
            on_text=screen.reply if screen.live is not None else None,
            on_line=screen.line)).start()
    try:
        info = await describe_run(handle)
        progress = Progress(run=handle.id, started=info.start_time, seen=skip)

        def polled(at: Position) -> None:
            progress.status, progress.step, progress.node = at.status, at.step, at.node
            if progress_line:
                screen.progress(progress.line(datetime.now(UTC)), last=False)

        async for seen in follow(handle, skip=skip, stop_at_pause=stop_at_pause,
                                 stop_when_idle=stop_when_idle, poll_seconds=poll_seconds,
                                 timeout=timeout, on_poll=polled,
                                 workflows=_project_agents(agents)):
            if isinstance(seen, RunEnd):
                if pump is not None:
                    await pump.stop()
                progress.status, progress.step, progress.node = seen.status, seen.step, seen.node
                progress.idle, progress.closed, progress.reason = (seen.idle, seen.closed,
                                                                   seen.reason)
                if progress_line:
                    screen.progress(progress.line(datetime.now(UTC)), last=True)
                return progress
            screen.transition(handle.id, seen)
            progress.transitions.append(seen)
            progress.seen += 1
        raise AssertionError("follow ends with a RunEnd")  # pragma: no cover
    finally:
        if pump is not None:
            await pump.stop()
        screen.close()


def _project_agents(agents: Callable[[], dict[str, type]]) -> list[type]:
    """The project's agents, to read a closed run's log with no worker; none outside a
    project (the log then comes from a worker, or is not shown)."""
    try:
        return list(agents().values())
    except ValueError:
        return []


async def follow(handle: WorkflowHandle[Any, Any], *, skip: int = 0,
                 out: TextIO | None = None) -> str:
    """Print each transition (after the first ``skip``) to ``out`` (stdout) until the run
    ends or pauses at a gate; the status it stopped at."""
    return (await watch(handle, skip=skip, out=out, progress_line=False)).status

"""A run live on the terminal: each transition as a line under a progress line (step, node,
status, elapsed) redrawn in place, and the model's reply as it forms (rich's Live display);
JSON Lines with ``--json``. Following is the client's (``tower.client.follow``), and so is
reading the stream (``tower.client.stream``, from the store the workers write:
docs/streaming.md); a worker that keeps no stream, or a store this host cannot see, only
means the reply shows when it is whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TextIO

from rich.text import Text
from temporalio.client import Client, WorkflowHandle

from tower.activities.streams import StreamStore, open_streams
from tower.client._follow import Position
from tower.contract.render import escape
from tower.contract.stream import (
    CUSTOM,
    DELTA,
    DISCARD,
    MODEL_FINISHED,
    MODEL_STARTED,
    RETRYING,
    Reply,
    StreamEvent,
    stream_name,
)
from tower.core.engine import Transition

# What `tower run` adds to its transition lines (which it prints already).
MODEL_KINDS = frozenset({MODEL_STARTED, DELTA, MODEL_FINISHED, DISCARD})
# ... and the nodes' own events (``ctx.emit``): a line each, or a JSON line with --json.
RUN_KINDS = MODEL_KINDS | {CUSTOM}


def custom_line(event: StreamEvent) -> str:
    """A node's own event as one inert line: ``· node · label {data}`` (its text is the
    run's: escaped, never markup)."""
    fields = event.data
    data = json.dumps(fields.get("data", {}), ensure_ascii=False, sort_keys=True)
    text = f"· {fields.get('node', '?')} · {fields.get('label', '?')} {data}"
    return escape(text)[0]


class Region:
    """A transient region redrawn in place on a terminal (rich's Live display), with lines
    printed above it; elsewhere (a pipe, --json) only the lines."""

    def __init__(self, out: TextIO, live: bool) -> None:
        self.out = out
        self.live: Any = None
        if live and out.isatty():
            from rich.console import Console
            from rich.live import Live

            self.live = Live(Text(""), console=Console(file=out, highlight=False),
                             auto_refresh=False, transient=True)
            self.live.start()

    def line(self, text: str) -> None:
        """A line of its own, above the region."""
        if self.live is not None:
            self.live.console.print(Text(text))
        else:
            self.out.write(text + "\n")
            self.out.flush()

    def draw(self, text: str) -> None:
        if self.live is not None:
            self.live.update(Text(text), refresh=True)

    def close(self) -> None:
        if self.live is not None and self.live.is_started:
            self.live.stop()


class LiveText(Region):
    """Shows a reply as it forms: JSON lines, or a transient Live region on a terminal
    (``render`` draws it, with the text so far); elsewhere nothing until it is whole."""

    def __init__(self, out: TextIO, run: str, as_json: bool,
                 render: Callable[[str], str] | None = None,
                 kinds: Collection[str] | None = None,
                 on_text: Callable[[str], None] | None = None,
                 on_line: Callable[[str], None] | None = None) -> None:
        super().__init__(out, live=not as_json and on_text is None)
        self.run, self.as_json, self.kinds = run, as_json, kinds
        self.render = render or (lambda text: text)
        self.on_text = on_text  # another display shows the text (`tower run`'s progress)
        self.on_line = on_line  # ... and prints a node's own events (``custom_line``)
        self.reply = Reply()
        self.offset = 0

    def take(self, event: StreamEvent) -> None:
        self.offset = max(self.offset, event.offset)
        if self.kinds is not None and event.kind not in self.kinds:
            return
        changed = self.reply.take(event)  # (the fold, with --json too: `tower chat` asks)
        if self.as_json:
            self.out.write(json.dumps({"event": event.kind, "run": self.run,
                                       **event.as_json()}) + "\n")
            self.out.flush()
        elif event.kind == CUSTOM:
            self.line(custom_line(event))
        elif changed:
            if self.on_text is not None:
                self.on_text(self.shown())
            self.redraw()

    def shown(self) -> str:
        """The text so far, or, once its attempt was lost, that another is coming."""
        if self.reply.state == RETRYING:
            reason = escape(self.reply.reason)[0]  # an error's text: one inert line
            return f"retrying: {reason}" if reason else "retrying"
        return self.reply.text

    def line(self, text: str) -> None:
        """A line of its own, above the reply forming (``on_line``: another display's)."""
        if self.on_line is not None:
            self.on_line(text)
        else:
            super().line(text)

    def redraw(self) -> None:
        self.draw(self.render(self.shown()))


class StreamPump:
    """Reads run ``run``'s stream from its current end into ``view`` while the caller
    waits for something else (an update's reply, a run's end)."""

    def __init__(self, client: Client, run: str, view: LiveText,
                 store: StreamStore | None = None) -> None:
        self.client, self.run, self.view = client, run, view
        self.store = store or open_streams(create=False)
        self.task: asyncio.Task[None] | None = None

    async def start(self, after: int | None = None) -> StreamPump:
        """Read what comes after offset ``after`` (None: the stream's current end)."""
        if after is None:
            name = stream_name(self.client.namespace, self.run)
            after = await asyncio.to_thread(self.store.last, name)
        self.view.offset = after
        self.task = asyncio.create_task(self._pump())
        return self

    async def _pump(self) -> None:
        from tower.client import stream

        async for event in stream(self.client, self.run, after=self.view.offset,
                                  store=self.store):
            self.view.take(event)

    async def finish(self, timeout: float) -> None:
        """Read until the stream ends with the run (at most ``timeout`` seconds), then
        stop."""
        if self.task is not None:
            with contextlib.suppress(Exception):  # a timeout, or a store gone: stop now
                await asyncio.wait_for(asyncio.shield(self.task), timeout)
        await self.stop()

    async def stop(self) -> None:
        """Stop reading, after taking what was written until now (once)."""
        if self.task is None:
            return
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.task
        self.task = None
        name = stream_name(self.client.namespace, self.run)
        with contextlib.suppress(Exception):
            for event in await asyncio.to_thread(self.store.read, name, self.view.offset):
                self.view.take(event)
        self.view.close()


@dataclass
class Progress:
    """What the progress line shows; pure so it is tested without a terminal."""

    run: str
    step: int = 0
    node: str = "START"
    status: str = "STARTING"
    started: datetime | None = None
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


class _Screen(Region):
    """Where transitions go: plain lines, JSON Lines, or lines above a live progress line."""

    def __init__(self, out: TextIO, as_json: bool):
        super().__init__(out, live=not as_json)
        self.as_json = as_json
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
            self.out.write(json.dumps({"event": "transition", "run": run,
                                       **t.model_dump(mode="json")}) + "\n")
        else:
            self._reply = ""  # a move: the text shown so far was that node's
            calls = f"  [{', '.join(t.calls)}]" if t.calls else ""
            self.line(f"  step {t.step:>3}  {t.source:>16} → {t.target:<16} {t.reason}{calls}")

    def progress(self, line: str, *, last: bool) -> None:
        self._line = line
        if self.live is not None and not last:
            self._draw()
        elif last and not self.as_json:  # (a live region is never shown under --json)
            self.close()
            self.out.write(line + "\n")
        self.out.flush()


async def watch(
    handle: WorkflowHandle[Any, Any], *, as_json: bool = False, out: TextIO | None = None,
    stop_at_pause: bool = True, stop_when_idle: bool = False, poll_seconds: float = 0.25,
    timeout: float | None = None, skip: int = 0, progress_line: bool = True, client: Any = None,
) -> Progress:
    """Show the run's transitions as they happen until it ends (or pauses at a gate, if
    ``stop_at_pause``; or waits for outside input, if ``stop_when_idle``); return the last
    progress. ``skip`` transitions already shown are not printed again; ``timeout``
    bounds the wait (seconds). With ``client``, the model's text from the run's live stream
    shows as it forms (under the progress line; its events as JSON lines with --json)."""
    from tower.cli.agents import project_agents
    from tower.client import RunEnd, follow
    from tower.client._runs import describe as describe_run

    screen = _Screen(out or sys.stdout, as_json)
    pump = None
    if client is not None:
        pump = await StreamPump(client, handle.id, LiveText(
            screen.out, handle.id, as_json, kinds=RUN_KINDS,
            on_text=screen.reply if screen.live is not None else None,
            on_line=screen.line)).start()
    try:
        info = await describe_run(handle)
        progress = Progress(run=handle.id, started=info.start_time)

        def polled(at: Position) -> None:
            progress.status, progress.step, progress.node = at.status, at.step, at.node
            if progress_line:
                screen.progress(progress.line(datetime.now(UTC)), last=False)

        async for seen in follow(handle, skip=skip, stop_at_pause=stop_at_pause,
                                 stop_when_idle=stop_when_idle, poll_seconds=poll_seconds,
                                 timeout=timeout, on_poll=polled,
                                 workflows=project_agents()):
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
        raise AssertionError("follow ends with a RunEnd")  # pragma: no cover
    finally:
        if pump is not None:
            await pump.stop()
        screen.close()


async def follow(handle: WorkflowHandle[Any, Any], *, skip: int = 0,
                 out: TextIO | None = None) -> str:
    """Print each transition (after the first ``skip``) to ``out`` (stdout) until the run
    ends or pauses at a gate; the status it stopped at."""
    return (await watch(handle, skip=skip, out=out, progress_line=False)).status

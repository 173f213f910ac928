"""A run's live stream on the terminal: the reply as it forms, redrawn in place (rich's Live
display) on a terminal; with ``--json``, each stream event as one JSON line.

`tower chat` shows each turn's reply forming, `tower run` the model's text under its
progress line. The stream is read with ``tower.client.stream`` from the store the workers
write (TOWER_STREAMS, else beside TOWER_DB: docs/streaming.md); a worker that keeps no
stream, or a store this host cannot see, only means the reply shows when it is whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Collection
from typing import Any, TextIO

from rich.text import Text
from temporalio.client import Client

from tower.activities.streams import StreamStore, open_streams
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

# What `tower run` adds to its transition lines (which it prints already).
MODEL_KINDS = frozenset({MODEL_STARTED, DELTA, MODEL_FINISHED, DISCARD})
# ... and the nodes' own events (``ctx.emit``): a line each, or a JSON line with --json.
RUN_KINDS = MODEL_KINDS | {CUSTOM}


def event_json(run: str, event: StreamEvent) -> dict[str, Any]:
    return {"event": event.kind, "run": run, **event.as_json()}


def custom_line(event: StreamEvent) -> str:
    """A node's own event as one inert line: ``· node · label {data}`` (its text is the
    run's: escaped, never markup)."""
    from tower.contract.render import escape

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
            self.out.write(json.dumps(event_json(self.run, event)) + "\n")
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
            from tower.contract.render import escape

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

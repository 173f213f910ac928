"""Server-sent events from the inbox (docs/streaming.md):

- ``GET /api/runs/RUN/stream``: run RUN's live stream (the model's text as it forms, each
  step), one SSE event per stream event, its offset as the event id: a browser's
  EventSource that reconnects sends ``Last-Event-ID`` and resumes there (``?after=N``
  does the same by hand). It ends with an ``end`` event once the run has ended. Signed in
  like every page, and only for a run whose page this user may see (visibility.py). A run that
  is not there yet is waited for, up to ``?wait=`` seconds (WAIT_SECONDS, at most that),
  then 404; the first line is ``retry:``, so a dropped EventSource comes back soon. Each
  model event carries ``reply``: the fold (``Reply``) after it, the whole text shown and
  its state, for a client that does not fold attempts itself.
- ``GET /api/list/stream``: the signed-in approver's list, sent again (rendered rows)
  whenever it changes, so the open list updates in place, without a reload.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from tower.activities.streams import StreamStore, open_streams
from tower.cli.inbox.identity import Approver
from tower.cli.inbox.visibility import NotOurRequest, not_found, visible_run
from tower.contract.stream import DELTA, DISCARD, MODEL_FINISHED, MODEL_STARTED, Reply, stream_name

if TYPE_CHECKING:
    from tower.cli.inbox.pages import Inbox

MODEL_KINDS = frozenset({MODEL_STARTED, DELTA, MODEL_FINISHED, DISCARD})
LIST_SECONDS = 1.0  # the list's check (from the pages' one-second cache of visibility)
KEEP_ALIVE_SECONDS = 15.0  # a comment line, so proxies keep the connection open
MAX_SECONDS = 30 * 60  # then the browser reconnects, with the session checked again
WAIT_SECONDS = 60.0  # the longest a stream waits for its run to appear
WAIT_POLL_SECONDS = 0.5
RETRY_MS = 2000  # EventSource's reconnection delay
HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


def sse(event: str, data: dict[str, Any], id: int | None = None) -> str:
    head = f"id: {id}\n" if id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data)}\n\n"


class LiveEvents:
    def __init__(self, inbox: Inbox, store: StreamStore | None = None) -> None:
        self.inbox = inbox
        self.store = store or open_streams(create=False)

    async def run_stream(self, request: Request, approver: Approver) -> Response:
        from tower.client import stream
        from tower.client._stream import folded

        run = request.path_params["run"]
        after = _offset(request.headers.get("last-event-id")
                        or request.query_params.get("after"))
        if after is None:
            return Response("Last-Event-ID and ?after= take an offset (a whole number)", 400)
        wait = _wait(request.query_params.get("wait"))
        if wait is None:
            return Response(f"?wait= takes seconds, 0 to {WAIT_SECONDS:g}", 400)
        try:
            seen = await self._visible(approver, run, wait)
        except NotOurRequest as exc:
            return Response(f"run {run!r} is not one this inbox can show: {exc}", 404)
        if seen is None:  # not there, or not this user's to see: the same answer
            return Response(not_found(run, self.inbox.config.tenant), 404)

        name = stream_name(self.inbox.client.namespace, run)

        async def events() -> AsyncIterator[str]:
            started = time.monotonic()
            yield f"retry: {RETRY_MS}\n\n"
            # A resumed reader's fold starts from what it had: the events up to `after`.
            reply = (await asyncio.to_thread(folded, self.store, name, after))[0] \
                if after else Reply()
            async for event in stream(self.inbox.client, run, after=after, store=self.store):
                data = event.as_json()
                if event.kind in MODEL_KINDS:  # the whole text shown so far, and its state
                    reply.take(event)
                    data["reply"] = reply.as_json()
                yield sse(event.kind, data, id=event.offset)
                if time.monotonic() - started > MAX_SECONDS:
                    return  # the browser reconnects from its last id, signed in or not
            yield sse("end", {"run": run})

        return StreamingResponse(events(), media_type="text/event-stream", headers=HEADERS)

    async def _visible(self, approver: Approver, run: str, wait: float) -> Any:
        """``visible_run``, asked again until it answers or ``wait`` seconds pass: a page
        opened just before its run starts gets the run, not a 404."""
        deadline = time.monotonic() + wait
        while True:
            seen = await visible_run(self.inbox, approver, run, fresh=True)
            if seen is not None or time.monotonic() >= deadline:
                return seen
            await asyncio.sleep(WAIT_POLL_SECONDS)

    async def list_stream(self, request: Request, approver: Approver) -> Response:
        from tower.cli.inbox.pages import list_fingerprint

        rows = self.inbox.templates.get_template("runs_table.html")

        async def events() -> AsyncIterator[str]:
            shown, started, quiet = None, time.monotonic(), time.monotonic()
            while time.monotonic() - started < MAX_SECONDS:
                runs = await self.inbox._waiting(approver)
                fingerprint = list_fingerprint(runs)
                if fingerprint != shown:
                    html = rows.render(runs=runs, approver=approver, now=datetime.now(UTC))
                    yield sse("list", {"fingerprint": fingerprint, "runs": len(runs),
                                       "html": html})
                    shown, quiet = fingerprint, time.monotonic()
                elif time.monotonic() - quiet > KEEP_ALIVE_SECONDS:
                    yield ": still here\n\n"
                    quiet = time.monotonic()
                await asyncio.sleep(LIST_SECONDS)

        return StreamingResponse(events(), media_type="text/event-stream", headers=HEADERS)


def _wait(raw: str | None) -> float | None:
    if raw is None or raw == "":
        return WAIT_SECONDS
    try:
        seconds = float(raw)
    except ValueError:
        return None
    return seconds if 0 <= seconds <= WAIT_SECONDS else None


def _offset(raw: str | None) -> int | None:
    if raw is None or raw == "":
        return 0
    return int(raw) if raw.isdigit() and len(raw) < 19 else None

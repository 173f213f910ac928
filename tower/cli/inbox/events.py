"""Server-sent events from the inbox (docs/streaming.md):

- ``GET /api/runs/RUN/stream``: run RUN's live stream (the model's text as it forms, each
  step), one SSE event per stream event, its offset as the event id: a browser's
  EventSource that reconnects sends ``Last-Event-ID`` and resumes there (``?after=N``
  does the same by hand). It ends with an ``end`` event once the run has ended. Signed in
  like every page, and only for a run whose page this user may see (scope.py).
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
from tower.cli.inbox.picture import NotOurRequest
from tower.cli.inbox.scope import not_found, visible_run

if TYPE_CHECKING:
    from tower.cli.inbox.pages import Inbox

LIST_SECONDS = 1.0  # the list's check (from the pages' one-second cache of visibility)
KEEP_ALIVE_SECONDS = 15.0  # a comment line, so proxies keep the connection open
MAX_SECONDS = 30 * 60  # then the browser reconnects, with the session checked again
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

        run = request.path_params["run"]
        try:
            seen = await visible_run(self.inbox, approver, run)
        except NotOurRequest as exc:
            return Response(f"run {run!r} is not one this inbox can show: {exc}", 404)
        if seen is None:  # not there, or not this user's to see: the same answer
            return Response(not_found(run, self.inbox.config.tenant), 404)
        after = _offset(request.headers.get("last-event-id")
                        or request.query_params.get("after"))
        if after is None:
            return Response("Last-Event-ID and ?after= take an offset (a whole number)", 400)

        async def events() -> AsyncIterator[str]:
            started = time.monotonic()
            async for event in stream(self.inbox.client, run, after=after, store=self.store):
                yield sse(event.kind, event.as_json(), id=event.offset)
                if time.monotonic() - started > MAX_SECONDS:
                    return  # the browser reconnects from its last id, signed in or not
            yield sse("end", {"run": run})

        return StreamingResponse(events(), media_type="text/event-stream", headers=HEADERS)

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


def _offset(raw: str | None) -> int | None:
    if raw is None or raw == "":
        return 0
    return int(raw) if raw.isdigit() and len(raw) < 19 else None

"""A run's live stream, as a client reads it: the model's text as it forms and each step,
from the stream store (not the history: docs/streaming.md)::

    shown, last = Reply(), 0
    async for event in stream(client, "chat-1234", after=last):
        last = event.offset            # resume from here after a disconnect
        if shown.take(event):          # deltas, and a discarded attempt's text dropped
            print(shown.text)

It ends at the run's ``run_end`` event, or once its execution closed and nothing is left
(a run that failed before its first step has none). A chat thread never ends by itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from temporalio.client import Client

from tower.activities.streams import StreamStore, open_streams
from tower.client._runs import closed, describe
from tower.contract.stream import RUN_END, Reply, StreamEvent, stream_name

# How often an idle stream asks the server whether the run has closed.
CHECK_SECONDS = 1.0


async def stream(client: Client, run: str, *, after: int = 0, store: StreamStore | None = None,
                 poll_seconds: float = 0.05) -> AsyncIterator[StreamEvent]:
    """Yield the events of run ``run`` with an offset above ``after``, as they come."""
    own = store is None
    streams = open_streams(create=False) if store is None else store
    name = stream_name(client.namespace, run)
    handle = client.get_workflow_handle(run)
    loop = asyncio.get_running_loop()
    await describe(handle)  # RunNotFound for a run that does not exist
    checked = loop.time()
    try:
        while True:
            events = await asyncio.to_thread(streams.read, name, after)
            for event in events:
                after = event.offset
                yield event
                if event.kind == RUN_END:
                    return
            if events:
                continue
            if loop.time() - checked >= CHECK_SECONDS:
                checked = loop.time()
                if closed(await describe(handle)):
                    # What was written before it closed, then the end.
                    for event in await asyncio.to_thread(streams.read, name, after):
                        yield event
                    return
            await asyncio.sleep(poll_seconds)
    finally:
        if own:
            streams.close()


def folded(store: StreamStore, name: str, upto: int | None = None) -> tuple[Reply, int]:
    """The fold of stream ``name`` up to offset ``upto`` (None: all there is), and the last
    offset read: what a reader attaching late shows of the reply in flight."""
    reply, after = Reply(), 0
    while upto is None or after < upto:
        events = store.read(name, after)
        if not events:
            break
        for event in events:
            if upto is not None and event.offset > upto:
                return reply, after
            reply.take(event)
            after = event.offset
    return reply, after

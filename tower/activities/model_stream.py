"""The model activity's side of a run's stream: each attempt's text as it arrives.

A call may be attempted several times (a retry, a fallback, a worker killed mid-reply).
When an attempt begins, every earlier attempt of the call not discarded yet is discarded
(a killed worker could not say so), so a subscriber drops its partial text; a discard says
why and whether another attempt comes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import activity

from tower.contract.stream import DELTA, DISCARD, MODEL_FINISHED, MODEL_STARTED, StreamEvent
from tower.contract.stream import stream_name as name_of
from tower.contract.wire import ModelReply, ModelRequest

from .streams import StreamStore, new_key, outage_of

# Said of an attempt that never said it failed: a new attempt of its call began.
LOST = "attempt lost (its worker stopped or it timed out); retried"


class AttemptStream:
    """Publishes one model call's attempts. Store calls run on a thread; a failure to
    publish never fails the call."""

    def __init__(self, store: StreamStore, stream: str, call: str, node: str,
                 deltas: bool = True) -> None:
        self.store, self.stream, self.call, self.node = store, stream, call, node
        self.deltas = deltas  # False: structured output, published whole when it is done
        self.attempt = ""
        self._deltas = 0

    @classmethod
    def for_activity(cls, store: StreamStore | None, request: ModelRequest
                     ) -> AttemptStream | None:
        # A context reduction's summary is not a reply: nothing to show.
        if store is None or request.summarise is not None:
            return None
        info = activity.info()
        # Structured output is JSON until it is whole: it is published whole, at the end.
        return cls(store, name_of(info.workflow_namespace or "", info.workflow_id or ""),
                   f"{info.workflow_run_id}/{info.activity_id}/", request.node,
                   deltas=request.response_schema is None)

    async def begin(self) -> None:
        """A new attempt: earlier ones of this call are discarded first."""
        def begin() -> None:
            earlier = self.store.with_prefix(self.stream, self.call, [MODEL_STARTED, DISCARD])
            dropped = {e.data["attempt"] for e in earlier if e.kind == DISCARD}
            stale = [e.data["attempt"] for e in earlier
                     if e.kind == MODEL_STARTED and e.data["attempt"] not in dropped]
            self.attempt, self._deltas = new_key()[:12], 0
            self.store.append(self.stream, [
                *(self._discard(a, LOST) for a in stale),
                StreamEvent(MODEL_STARTED, {"attempt": self.attempt, "node": self.node},
                            key=f"{self.call}{self.attempt}/started")])
        await self._quietly(begin)

    async def delta(self, text: str) -> None:
        if not text or not self.attempt or not self.deltas:
            return
        self._deltas += 1
        event = StreamEvent(DELTA, {"attempt": self.attempt, "text": text},
                            key=f"{self.call}{self.attempt}/d{self._deltas}")
        await self._quietly(lambda: self.store.append(self.stream, [event]))

    async def finish(self, reply: ModelReply) -> None:
        data: dict[str, Any] = {"attempt": self.attempt, "model": reply.model}
        if reply.tool_calls:  # tool calls arrive whole
            data["tool_calls"] = [c.model_dump(mode="json") for c in reply.tool_calls]
        if not self.deltas and reply.content is not None:
            data["content"] = reply.content
        event = StreamEvent(MODEL_FINISHED, data, key=f"{self.call}{self.attempt}/finished")
        await self._quietly(lambda: self.store.append(self.stream, [event]))

    async def discard(self, reason: str, retrying: bool = True) -> None:
        if self.attempt:
            event = self._discard(self.attempt, reason, retrying)
            self.attempt = ""
            await self._quietly(lambda: self.store.append(self.stream, [event]))

    def _discard(self, attempt: str, reason: str, retrying: bool = True) -> StreamEvent:
        return StreamEvent(DISCARD, {"attempt": attempt, "reason": reason[:200],
                                     "retrying": retrying},
                           key=f"{self.call}{attempt}/discard")

    async def _quietly(self, work: Any) -> None:
        # The stream is for watching: a store that is down costs the watchers, not the run
        # (said once per outage, not per event: tower/activities/streams.py).
        await asyncio.shield(asyncio.to_thread(outage_of(self.store).publish, work))

"""The model activity's side of a run's stream: each attempt's text as it arrives.

A call may be attempted several times (a retry, a fallback, a worker killed mid-reply).
When an attempt begins, every earlier attempt of the call not discarded yet is discarded
(a killed worker could not say so), so a subscriber drops its partial text; a discard says
why and whether another attempt comes.

Replies are read as they form, each piece of text published. Tool calls and structured
output reach subscribers whole, with ``model_finished``. The activity returns the same
``ModelReply`` as without streaming: the history is unchanged. Every request asks to
stream, and nothing is remembered of the answer: a compatible server (or a proxy routing
to several) may answer with a whole completion (read whole), or refuse the streaming with a
400 (asked again once without it).
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import TYPE_CHECKING, Any

from temporalio import activity

from tower.contract.failures import Code, TowerError, failure
from tower.contract.stream import DELTA, DISCARD, MODEL_FINISHED, MODEL_STARTED, StreamEvent
from tower.contract.stream import stream_name as name_of
from tower.contract.wire import ModelReply, ModelRequest, ToolCallRequest
from tower.core.state import Usage

from .streams import StreamStore, new_key

if TYPE_CHECKING:
    import openai
    from openai.types.chat import ChatCompletion

# A scripted "token": a word and the space after it.
_PIECES = re.compile(r"\S+\s*|\s+")
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
        await asyncio.shield(asyncio.to_thread(self.store.outage.publish, work))


async def streamed(client: openai.AsyncOpenAI, kwargs: dict[str, Any],
                   wire_names: dict[str, str], live: AttemptStream) -> ModelReply:
    """One completion asked as a stream, its text published as it arrives."""
    model = str(kwargs["model"])
    chunks = await client.chat.completions.create(
        **kwargs, stream=True, stream_options={"include_usage": True})
    if "json" in chunks.response.headers.get("content-type", ""):
        # A whole completion where events were asked for: read it whole (an SSE reader
        # would find no event in it, and the reply would look empty).
        try:
            body = await chunks.response.aread()
        finally:
            await chunks.close()
        from openai.types.chat import ChatCompletion

        return await reply_of(ChatCompletion.model_validate_json(body), model, wire_names, live)
    text: list[str] = []
    refusal: list[str] = []
    calls: dict[int, list[str]] = {}
    usage, answered = None, model
    async for chunk in chunks:
        answered = chunk.model or answered
        usage = chunk.usage or usage
        for choice in chunk.choices:
            delta = choice.delta
            if delta.content:
                text.append(delta.content)
                await live.delta(delta.content)
            if getattr(delta, "refusal", None):
                refusal.append(str(delta.refusal))
            for call in delta.tool_calls or []:
                name_args = calls.setdefault(call.index, ["", ""])
                if call.function is not None:
                    name_args[0] += call.function.name or ""
                    name_args[1] += call.function.arguments or ""
    return _reply(model, answered, "".join(text) if text else None, "".join(refusal),
                  [c for _, c in sorted(calls.items())], usage, wire_names)


async def reply_of(response: ChatCompletion, model: str, wire_names: dict[str, str],
                   live: AttemptStream | None = None) -> ModelReply:
    """A whole completion as Tower's reply (no choice at all: an empty reply), its text
    published at once to ``live``."""
    if not response.choices:
        return ModelReply(model=response.model or model, usage=Usage(calls=1))
    message = response.choices[0].message
    calls = [[c.function.name, c.function.arguments]
             for c in (message.tool_calls or []) if c.type == "function"]
    reply = _reply(model, response.model, message.content, getattr(message, "refusal", None),
                   calls, response.usage, wire_names)
    if live is not None:
        await live.delta(message.content or "")
    return reply


def _reply(model: str, answered: str | None, content: str | None, refusal: str | None,
           calls: list[list[str]], usage: Any, wire_names: dict[str, str]) -> ModelReply:
    """Tower's reply from a completion's parts (streamed or whole); a refusal fails."""
    if refusal:
        raise failure(TowerError(f"{model} refused: {refusal}", code=Code.MODEL_REFUSED))
    return ModelReply(
        model=answered or model, content=content,
        tool_calls=[ToolCallRequest(name=wire_names.get(name, name),
                                    arguments=arguments_of(arguments))
                    for name, arguments in calls],
        usage=Usage(calls=1) if usage is None else Usage(
            calls=1, prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens))


async def stream_scripted(reply: ModelReply, live: AttemptStream, tokens_per_second: float,
                          ) -> None:
    """Publish the scripted reply's text a word at a time, at ``tokens_per_second``."""
    for piece in _PIECES.findall(reply.content or ""):
        if tokens_per_second > 0:
            await asyncio.sleep(1 / tokens_per_second)
        await live.delta(piece)


def arguments_of(raw: str | None) -> dict[str, Any]:
    try:
        parsed = json.loads(raw or "{}")
    except json.JSONDecodeError:
        return {"_unparseable_arguments": raw}
    return parsed if isinstance(parsed, dict) else {"_not_an_object": parsed}

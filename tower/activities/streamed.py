"""Model replies read as they form, each piece of text published to the run's stream.

Tool calls and structured output reach subscribers whole, with ``model_finished``. The
activity returns the same ``ModelReply`` as without streaming: the history is unchanged.

Every request asks to stream, and nothing is remembered of the answer: a compatible server
(or a proxy routing to several) may answer with a whole completion (read whole), or refuse
the streaming with a 400 (asked again once without it).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from typing import TYPE_CHECKING, Any

from temporalio.exceptions import ApplicationError

from tower.contract.failures import Code, TowerError, failure
from tower.contract.wire import ModelReply, ToolCallRequest
from tower.core.state import Usage

from .model_stream import AttemptStream

if TYPE_CHECKING:
    import openai
    from openai.types.chat import ChatCompletion

# A scripted "token": a word and the space after it.
_PIECES = re.compile(r"\S+\s*|\s+")


def refuses_streaming(exc: BaseException) -> bool:
    """A 400 (or 422) to a streaming request: maybe the streaming, so ask once plainer."""
    openai = sys.modules.get("openai")
    return (openai is not None and isinstance(exc, openai.APIStatusError)
            and exc.status_code in (400, 422))


class EmptyReply(TowerError):
    """The server answered with no text, no tool call and no refusal."""

    CODE = Code.EMPTY_REPLY

    def __init__(self, model: str, base_url: str | None) -> None:
        where = base_url or "the OpenAI default endpoint"
        super().__init__(f"the server returned an empty reply (model {model} at {where})")


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

        return await published(reply_of(ChatCompletion.model_validate_json(body), model,
                                        wire_names), live)
    text: list[str] = []
    refusal: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    usage, answered = Usage(calls=1), model
    async for chunk in chunks:
        answered = chunk.model or answered
        if chunk.usage is not None:
            usage = Usage(calls=1, prompt_tokens=chunk.usage.prompt_tokens,
                          completion_tokens=chunk.usage.completion_tokens)
        for choice in chunk.choices:
            delta = choice.delta
            if delta.content:
                text.append(delta.content)
                await live.delta(delta.content)
            if getattr(delta, "refusal", None):
                refusal.append(str(delta.refusal))
            for call in delta.tool_calls or []:
                entry = calls.setdefault(call.index, {"name": "", "arguments": ""})
                if call.function is not None:
                    entry["name"] += call.function.name or ""
                    entry["arguments"] += call.function.arguments or ""
    if refusal:
        raise refused(model, "".join(refusal))
    tool_calls = [ToolCallRequest(name=wire_names.get(c["name"], c["name"]),
                                  arguments=arguments_of(c["arguments"]))
                  for _, c in sorted(calls.items())]
    return ModelReply(model=answered, content="".join(text) if text else None,
                      tool_calls=tool_calls, usage=usage)


async def published(reply: ModelReply, live: AttemptStream) -> ModelReply:
    """A whole completion's text published at once."""
    await live.delta(reply.content or "")
    return reply


def reply_of(response: ChatCompletion, model: str, wire_names: dict[str, str]) -> ModelReply:
    """A whole completion as Tower's reply (no choice at all: an empty reply)."""
    if not response.choices:
        return ModelReply(model=response.model or model, usage=Usage(calls=1))
    message = response.choices[0].message
    if getattr(message, "refusal", None):
        raise refused(model, message.refusal)
    calls = [ToolCallRequest(name=wire_names.get(c.function.name, c.function.name),
                             arguments=arguments_of(c.function.arguments))
             for c in (message.tool_calls or []) if c.type == "function"]
    usage = Usage(calls=1)
    if response.usage is not None:
        usage = Usage(calls=1, prompt_tokens=response.usage.prompt_tokens,
                      completion_tokens=response.usage.completion_tokens)
    return ModelReply(model=response.model or model, content=message.content,
                      tool_calls=calls, usage=usage)


async def stream_scripted(reply: ModelReply, live: AttemptStream, tokens_per_second: float,
                          ) -> None:
    """Publish the scripted reply's text a word at a time, at ``tokens_per_second``."""
    for piece in _PIECES.findall(reply.content or ""):
        if tokens_per_second > 0:
            await asyncio.sleep(1 / tokens_per_second)
        await live.delta(piece)


def refused(model: str, refusal: str | None) -> ApplicationError:
    return failure(TowerError(f"{model} refused: {refusal}", code=Code.MODEL_REFUSED))


def arguments_of(raw: str | None) -> dict[str, Any]:
    try:
        parsed = json.loads(raw or "{}")
    except json.JSONDecodeError:
        return {"_unparseable_arguments": raw}
    return parsed if isinstance(parsed, dict) else {"_not_an_object": parsed}

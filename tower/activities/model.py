"""The model activity: any OpenAI-compatible endpoint through the openai SDK.

Rate limits (honouring Retry-After), 5xx, timeouts and dropped connections are retryable;
other 4xx answers and refusals are not. Within one attempt the ordered model list is
walked (a model, optionally at its own endpoint). The SDK's own retries are off: every
attempt is an attempt in the history. A call on a stored conversation window sends one
window ref and gets one back: the messages, summary and list stay in the message store
(the mechanics: tower/core/window.py).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from functools import partial
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from temporalio import activity
from temporalio.exceptions import ApplicationError

from tower import Message
from tower.contract.failures import Code, TowerError, failure
from tower.contract.render import inert
from tower.contract.wire import AGENT_HEADER, NODE_HEADER, MessageRef, ModelReply, ModelRequest
from tower.core import window
from tower.core.state import Usage
from tower.core.window import WindowPolicy

from .messages import MessageStore
from .model_stream import (
    AttemptStream,
    reply_of,
    stream_scripted,
    streamed,
)
from .prices import PriceTable
from .scripted import SCRIPTED_MODEL, Scripts, scripted_reply
from .streams import StreamStore

if TYPE_CHECKING:  # imported by the first real model call: a worker on the scripted model,
    import openai  # or one that has made none yet, starts without it (40% of a start-up)

# A gateway asking for more than this gets it capped: the run's own budget decides.
MAX_RETRY_AFTER = 300.0
# How much of a server's own words about an error a failure shows.
SAID_CHARS = 300
DEFAULT_ENDPOINT = "the OpenAI default endpoint"
Answer = Callable[[ModelRequest], Awaitable[ModelReply]]


class Verdict(StrEnum):
    RETRY = "retry"  # transient: try the next model now, this one again later
    SKIP = "skip"  # this model cannot serve (not found, out of quota): the next one might
    REJECT = "reject"  # the request itself is wrong: no model and no retry will help


@dataclass(frozen=True)
class Endpoint:
    model: str
    base_url: str | None = None  # None: the configured OPENAI_BASE_URL


def parse_models(entries: list[str]) -> list[Endpoint]:
    """``["gpt-4o-mini", "llama3@http://127.0.0.1:11434/v1"]`` -> endpoints, in order."""
    out = []
    for entry in entries:
        model, sep, url = entry.strip().partition("@")
        if not model or (sep and not url.startswith(("http://", "https://"))):
            raise ValueError(f"bad model entry {entry!r}: use NAME or NAME@http(s)://HOST/v1")
        out.append(Endpoint(model, url or None))
    return out


def classify(exc: BaseException) -> Verdict:
    openai = sys.modules.get("openai")  # not imported yet: the error cannot be one of its own
    if openai is not None and isinstance(exc, openai.RateLimitError):
        return Verdict.SKIP if exc.code == "insufficient_quota" else Verdict.RETRY
    if openai is not None and isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        if status >= 500 or status in (408, 409):
            return Verdict.RETRY
        return Verdict.SKIP if status == 404 else Verdict.REJECT
    # Timeouts, dropped connections, garbled bodies (JSON, validation): the endpoint's trouble.
    return Verdict.RETRY


def retry_after(exc: BaseException | None) -> float | None:
    """Seconds the server asked us to wait (Retry-After / retry-after-ms), capped."""
    response = getattr(exc, "response", None)
    if response is None:
        return None
    headers = response.headers
    try:
        if headers.get("retry-after-ms"):
            seconds = float(headers["retry-after-ms"]) / 1000
        elif headers.get("retry-after"):
            seconds = float(headers["retry-after"])
        else:
            return None
    except ValueError:
        return None  # an HTTP date: rare from model APIs; fall back to our backoff
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def brief(exc: BaseException) -> str:
    """``exc`` in one line. A server's own words (its body's message, else its body) are
    hostile: cut to ``SAID_CHARS``, inert and in double quotes, never mistakable for
    Tower's own."""
    status = getattr(exc, "status_code", None)
    name = exc.code if isinstance(exc, TowerError) else type(exc).__name__
    if not status:
        return f"{name}: {str(exc)[:120]}"
    body = getattr(exc, "body", None)
    words = body.get("message") if isinstance(body, dict) else body
    if not isinstance(words, str) or not words.strip():
        return f"{name} ({status})"
    cut = "…" if len(words) > SAID_CHARS else ""
    said = inert(words[:SAID_CHARS]).replace('"', '\\"')
    return f'{name} ({status}): the server said "{said}"{cut}'


@dataclass(frozen=True)
class ModelSettings:
    """Where model calls go. No API key means the offline scripted model."""

    api_key: str | None = None
    base_url: str | None = None
    # Ordered fallbacks: "NAME" (at base_url) or "NAME@http(s)://HOST/v1" (its own endpoint).
    models: list[str] = field(default_factory=lambda: ["gpt-4o-mini"])
    timeout_seconds: float = 60.0
    prices: PriceTable = field(default_factory=PriceTable)
    # Stream replies (the openai SDK's streaming; the scripted model's text in pieces) to
    # the run's stream, when the worker has a stream store (docs/streaming.md).
    stream: bool = True
    # The scripted model's pace when streaming (0: as fast as it can).
    scripted_tokens_per_second: float = 0.0

    def __post_init__(self) -> None:
        parse_models(self.models)  # a bad entry is a clear error at start-up, not mid-run

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ModelSettings:
        env = os.environ if env is None else env
        models = [m.strip() for m in env.get("TOWER_MODELS", "").split(",") if m.strip()]
        return cls(
            api_key=env.get("OPENAI_API_KEY") or None,
            base_url=env.get("OPENAI_BASE_URL") or None,
            models=models or ["gpt-4o-mini"],
            timeout_seconds=float(env.get("TOWER_MODEL_TIMEOUT", "60")),
            prices=PriceTable.from_env(env),
            stream=env.get("TOWER_STREAM", "1") not in ("0", "off", "false"),
            scripted_tokens_per_second=float(env.get("TOWER_SCRIPTED_TOKENS_PER_SECOND", "0")),
        )

    @property
    def scripted(self) -> bool:
        return self.api_key is None

    def describe(self) -> str:
        if self.scripted:
            return f"{SCRIPTED_MODEL} (built-in, offline; set OPENAI_API_KEY for a real model)"
        return f"{', '.join(self.models)} at {self.base_url or DEFAULT_ENDPOINT}"


class ModelActivities:
    def __init__(self, settings: ModelSettings, store: MessageStore | None = None,
                 scripts: Scripts | None = None, streams: StreamStore | None = None) -> None:
        self.settings = settings
        self.store = store
        self.streams = streams if settings.stream else None  # the runs' live streams
        self.scripts = scripts or {}  # the scripted model's answers: tower.scripts_of(agents)
        self._clients: dict[str | None, openai.AsyncOpenAI] = {}

    def _client_for(self, base_url: str | None) -> openai.AsyncOpenAI:
        url = base_url or self.settings.base_url
        if url not in self._clients:
            import openai

            # max_retries=0: Temporal owns retries, so every attempt is in the history.
            self._clients[url] = openai.AsyncOpenAI(
                api_key=self.settings.api_key, base_url=url, max_retries=0,
                timeout=self.settings.timeout_seconds)
        return self._clients[url]

    @activity.defn
    async def call_model(self, request: ModelRequest) -> ModelReply:
        # Heartbeats say "still waiting on the model": a worker killed mid-call is
        # noticed at the heartbeat timeout and the call retried on another worker.
        beat = asyncio.create_task(_heartbeat())
        live = AttemptStream.for_activity(self.streams, request)
        try:
            if not (request.history or request.keep or request.window or request.windowed):
                reply = await self._answer(request, live)
            elif self.store is None:
                raise failure(TowerError("this worker has no message store",
                                         code=Code.NO_MESSAGE_STORE))
            else:
                reply = await stored_call(self.store, request, partial(self._answer, live=live))
        except BaseException as exc:
            if live is not None:  # subscribers drop this attempt's partial text
                await live.discard(brief(exc), retrying=_retried(exc))
            raise
        finally:
            beat.cancel()
        if live is not None:
            await live.finish(reply)
        return reply

    async def complete(self, request: ModelRequest) -> ModelReply:
        """The gateway outside a workflow: an eval's model judge."""
        return await self._answer(request)

    async def _answer(self, request: ModelRequest, live: AttemptStream | None = None
                      ) -> ModelReply:
        reply = await self._fallback(request, live)
        # Priced here, in the activity, so each call's cost is in the history and replays as is.
        reply.usage = self.settings.prices.priced(reply.model, reply.usage)
        # The activity's span (when tracing) carries the call in GenAI terms.
        trace.get_current_span().set_attributes({
            "gen_ai.operation.name": "chat", "gen_ai.response.model": reply.model,
            "gen_ai.usage.input_tokens": reply.usage.prompt_tokens,
            "gen_ai.usage.output_tokens": reply.usage.completion_tokens,
            "tower.agent": request.agent, "tower.node": request.node,
            "tower.cost_usd": reply.usage.cost_usd})
        return reply

    async def _fallback(self, request: ModelRequest, live: AttemptStream | None) -> ModelReply:
        if self.settings.scripted:
            reply = scripted_reply(request, self.scripts)
            if live is not None:
                await live.begin()
                await stream_scripted(reply, live, self.settings.scripted_tokens_per_second)
            return reply
        failures: list[str] = []
        waits: list[float] = []
        retryable = False
        last: Exception | None = None
        for endpoint in parse_models(request.models or self.settings.models):
            try:
                if live is not None:  # each model tried is an attempt of its own
                    await live.begin()
                reply = await self._ask(endpoint, request, live)
                if not reply.content and not reply.tool_calls:  # and no refusal: next model
                    where = endpoint.base_url or self.settings.base_url or DEFAULT_ENDPOINT
                    raise TowerError(f"the server returned an empty reply (model "
                                     f"{endpoint.model} at {where})", code=Code.EMPTY_REPLY)
                return reply
            except ApplicationError:
                raise  # a refusal: already classified
            except Exception as exc:
                verdict = classify(exc)
                if verdict is Verdict.REJECT:
                    raise failure(TowerError(
                        f"{endpoint.model} rejected the request: {brief(exc)}",
                        code=Code.MODEL_REQUEST_REJECTED)) from exc
                retryable = retryable or verdict is Verdict.RETRY
                wait = retry_after(exc)
                if wait is not None:
                    waits.append(wait)
                failures.append(f"{endpoint.model}: {brief(exc)}")
                last = exc
                activity.logger.warning("model %s failed (%s); trying the next",
                                        endpoint.model, brief(exc))
        if not retryable:
            raise failure(TowerError(f"no model can serve this: {'; '.join(failures)}",
                                     code=Code.MODEL_REQUEST_REJECTED)) from last
        # The soonest any model said it is back: the next attempt starts with that one.
        delay = timedelta(seconds=min(waits)) if waits else None
        raise failure(TowerError(f"no model answered: {'; '.join(failures)}",
                                 code=Code.MODEL_UNAVAILABLE, retry_after=delay)) from last

    async def _ask(self, endpoint: Endpoint, request: ModelRequest,
                   live: AttemptStream | None) -> ModelReply:
        kwargs, wire_names = _request_args(endpoint, request)
        client = self._client_for(endpoint.base_url)
        if live is not None:
            # Every request asks to stream (model_stream.py): an endpoint that answered
            # whole or refused once may stream the next time, so no answer is remembered.
            try:
                return await streamed(client, kwargs, wire_names, live)
            except Exception as exc:
                openai = sys.modules["openai"]  # a 400 (or 422) may be the streaming's
                if not (isinstance(exc, openai.APIStatusError) and exc.status_code in (400, 422)):
                    raise
                activity.logger.info("model %s refused a streaming request (%s); asking once "
                                     "without streaming", endpoint.model, brief(exc))
        response = await client.chat.completions.create(**kwargs)
        return await reply_of(response, endpoint.model, wire_names, live)


def _request_args(endpoint: Endpoint, request: ModelRequest
                  ) -> tuple[dict[str, Any], dict[str, str]]:
    """The SDK's arguments for ``request`` at ``endpoint``, and wire name -> tool name."""
    kwargs: dict[str, Any] = {
        "model": endpoint.model, "messages": _openai_messages(request),
        "extra_headers": {AGENT_HEADER: request.agent, NODE_HEADER: request.node}}
    # OpenAI's function names allow no dot: MCP tools (server.tool) travel as
    # server__tool and come back by this table, never by string surgery.
    wire_names = {_wire_name(t.name): t.name for t in request.tools}
    if request.tools:
        kwargs["tools"] = [{"type": "function", "function": {
            **t.model_dump(), "name": _wire_name(t.name)}} for t in request.tools]
    if request.response_schema is not None:
        kwargs["response_format"] = {"type": "json_schema", "json_schema": {
            "name": request.response_name or "answer", "schema": request.response_schema}}
    return kwargs, wire_names


def _wire_name(tool: str) -> str:
    return tool.replace(".", "__")


def _openai_messages(request: ModelRequest) -> list[dict[str, str]]:
    # Tool results go back as plain text: it works on every compatible endpoint,
    # without pairing ids across turns.
    return [*([{"role": "system", "content": request.system}] if request.system else []),
            *({"role": "user", "content": f"[result of tool {m.name}]\n{m.content}"}
              if m.role == "tool" else {"role": m.role, "content": m.content}
              for m in request.messages)]


def _retried(exc: BaseException) -> bool:
    """Whether Temporal may run this call again (a cancelled call or a final error: no)."""
    if isinstance(exc, asyncio.CancelledError):
        return False
    return not (isinstance(exc, ApplicationError) and exc.non_retryable)


async def _heartbeat() -> None:
    if activity.info().is_local:
        return  # a local activity has no heartbeat: its workflow task is its liveness
    timeout = activity.info().heartbeat_timeout or timedelta(seconds=30)
    while True:
        activity.heartbeat()
        await asyncio.sleep(max(timeout.total_seconds() / 3, 0.5))


def _open(store: MessageStore, request: ModelRequest,
          ) -> tuple[MessageRef | None, list[MessageRef], list[Message]]:
    """(summary, messages' refs, the messages to ask with) of the request's window."""
    summary: MessageRef | None = None
    context = list(request.history)  # a thread started before windows: its refs, once
    if request.window is not None:
        summary, kept = store.get_window(request.window)
        context += kept
    if request.summarise is not None:
        return summary, context, []
    return summary, context, store.get([*([summary] if summary else []), *context])


async def stored_call(store: MessageStore, request: ModelRequest, answer: Answer) -> ModelReply:
    """A call on stored messages (``history``, a window), keeping its own (``keep``): in a
    window, the new window's ref comes back; otherwise the kept messages' refs."""
    # SQLite blocks: each phase is one trip off the event loop, the write one transaction.
    summary, context, loaded = await asyncio.to_thread(_open, store, request)
    if request.summarise is not None:
        return await _reduce(store, request, answer, summary, context)
    reply = await answer(request.model_copy(update={
        "messages": [*loaded, *request.messages], "history": [], "window": None}))
    new = list(request.messages) if request.keep else []
    if reply.content and request.keep:
        new.append(Message(role="assistant", content=reply.content))
    if request.window or request.windowed:
        _, reply.window = await asyncio.to_thread(store.put_with_window, new, (summary, context))
    elif request.keep:
        reply.stored = await asyncio.to_thread(store.put, new)
    return reply


async def _reduce(store: MessageStore, request: ModelRequest, answer: Answer,
                  summary: MessageRef | None, context: list[MessageRef]) -> ModelReply:
    """Summarise the older messages (with the previous summary) into the new summary;
    keep the recent ones, large tool payloads pruned to stubs."""
    assert request.summarise is not None
    policy = WindowPolicy(keep_recent=request.summarise.keep_recent,
                          prune_chars=request.summarise.prune_chars)
    older, recent = window.split(policy, context)
    if older:
        loaded = await asyncio.to_thread(store.get, [*([summary] if summary else []), *older])
        reply = await answer(request.model_copy(update={
            "messages": [*loaded, *request.messages], "history": [], "window": None,
            "summarise": None}))
        (summary,) = await asyncio.to_thread(
            store.put, [Message(role="assistant", content=reply.content or "")])
        # The summary lives in the store; the history only needs to know it was made.
        reply.content = f"summary kept as message {summary.ref} ({summary.chars} characters)"
    else:  # only large payloads to prune: no model call
        reply = ModelReply(model="none", content="nothing older to summarise",
                           usage=Usage())
    reply.window = await asyncio.to_thread(store.put_window, summary, window.prune(policy, recent))
    return reply

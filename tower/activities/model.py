"""The model activity: any OpenAI-compatible endpoint through the openai SDK.

Rate limits (honouring Retry-After), 5xx, timeouts and dropped connections are retryable;
other 4xx answers and refusals are not. Within one attempt the ordered model list is
walked. The SDK's own retries are off: every attempt is an attempt in the history.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from temporalio import activity
from temporalio.exceptions import ApplicationError

from tower import Message
from tower.contract.failures import Code, TowerError, failure
from tower.contract.wire import ModelReply, ModelRequest

from .fallback import (
    AGENT_HEADER,
    NODE_HEADER,
    Endpoint,
    Verdict,
    brief,
    classify,
    parse_models,
    retry_after,
)
from .messages import MessageStore
from .model_stream import AttemptStream
from .prices import PriceTable
from .scripted import SCRIPTED_MODEL, Scripts, scripted_reply
from .streamed import EmptyReply, published, refuses_streaming, reply_of, stream_scripted, streamed
from .streams import StreamStore
from .windowed import windowed_call

if TYPE_CHECKING:  # imported by the first real model call (fallback.py says why)
    import openai


def _scripted(request: ModelRequest, scripts: Scripts) -> ModelReply:
    """The scripted model's reply; a script that raises is a bug in the project, not an
    outage: the call fails at once, naming the node and the script."""
    try:
        return scripted_reply(request, scripts)
    except ApplicationError:
        raise  # the script stands in for a model failure on purpose: classified already
    except Exception as exc:
        script = scripts.get((request.agent, request.node))
        name = getattr(script, "__qualname__", repr(script))
        raise failure(TowerError(
            f"the scripted model's script for {request.agent}/{request.node} ({name}) "
            f"raised {type(exc).__name__}: {exc}", code=Code.SCRIPT_FAILED)) from exc


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
        return f"{', '.join(self.models)} at {self.base_url or 'the OpenAI default endpoint'}"


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
            reply = await self._with_store(request, live)
        except BaseException as exc:
            if live is not None:  # subscribers drop this attempt's partial text
                await live.discard(brief(exc), retrying=_retried(exc))
            raise
        finally:
            beat.cancel()
        if live is not None:
            await live.finish(reply)
        return reply

    async def _with_store(self, request: ModelRequest, live: AttemptStream | None
                          ) -> ModelReply:
        def answer(r: ModelRequest) -> Awaitable[ModelReply]:
            return self._answer(r, live)

        if not (request.history or request.keep or request.window or request.windowed):
            return await answer(request)
        if self.store is None:
            raise failure(TowerError("this worker has no message store",
                                     code=Code.NO_MESSAGE_STORE))
        if request.window or request.windowed:
            return await windowed_call(self.store, request, answer)
        # SQLite blocks: keep it off the event loop the other activities share.
        loaded = await asyncio.to_thread(self.store.get, request.history)
        reply = await answer(request.model_copy(
            update={"messages": [*loaded, *request.messages], "history": []}))
        if request.keep:
            kept = list(request.messages)
            if reply.content:
                kept.append(Message(role="assistant", content=reply.content))
            reply.stored = await asyncio.to_thread(self.store.put, kept)
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
            reply = _scripted(request, self.scripts)
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
                if not reply.content and not reply.tool_calls:
                    raise EmptyReply(endpoint.model, self._url(endpoint))
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

    def _url(self, endpoint: Endpoint) -> str | None:
        return endpoint.base_url or self.settings.base_url

    async def _ask(self, endpoint: Endpoint, request: ModelRequest,
                   live: AttemptStream | None) -> ModelReply:
        kwargs, wire_names = _request_args(endpoint, request)
        client = self._client_for(endpoint.base_url)
        if live is None:
            response = await client.chat.completions.create(**kwargs)
            return reply_of(response, endpoint.model, wire_names)
        # Every request asks to stream (streamed.py): an endpoint that answered whole
        # or refused once may stream the next time, so no answer is remembered.
        try:
            return await streamed(client, kwargs, wire_names, live)
        except Exception as exc:
            if not refuses_streaming(exc):
                raise
            activity.logger.info("model %s refused a streaming request (%s); asking once "
                                 "without streaming", endpoint.model, brief(exc))
        response = await client.chat.completions.create(**kwargs)
        return await published(reply_of(response, endpoint.model, wire_names), live)


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
    out = [{"role": "system", "content": request.system}] if request.system else []
    for m in request.messages:
        out.append(_openai_message(m))
    return out


def _openai_message(m: Message) -> dict[str, str]:
    # Tool results go back as plain text: it works on every compatible endpoint,
    # without pairing ids across turns.
    if m.role == "tool":
        return {"role": "user", "content": f"[result of tool {m.name}]\n{m.content}"}
    return {"role": m.role, "content": m.content}


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

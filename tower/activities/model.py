"""The model activity: any OpenAI-compatible endpoint through the openai SDK.

Errors are classified so Temporal's retry policy does the right thing: rate limits
(honouring Retry-After), 5xx, timeouts and connection errors are retryable; other
4xx answers and refusals are not. Within one attempt the ordered model list is
walked, so a rate-limited or failing model falls back to the next one. The SDK's
own retries are off: every attempt is an attempt in the event history.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import openai
from opentelemetry import trace
from temporalio import activity
from temporalio.exceptions import ApplicationError

from tower import Message
from tower.contract.wire import ModelReply, ModelRequest, ToolCallRequest
from tower.core.state import Usage

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
from .prices import PriceTable
from .scripted import SCRIPTED_MODEL, Scripts, scripted_reply
from .windowed import windowed_call


@dataclass(frozen=True)
class ModelSettings:
    """Where model calls go. No API key means the offline scripted model."""

    api_key: str | None = None
    base_url: str | None = None
    # Ordered fallbacks: "NAME" (at base_url) or "NAME@http(s)://HOST/v1" (its own endpoint).
    models: list[str] = field(default_factory=lambda: ["gpt-4o-mini"])
    timeout_seconds: float = 60.0
    prices: PriceTable = field(default_factory=PriceTable)

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
                 scripts: Scripts | None = None) -> None:
        self.settings = settings
        self.store = store
        self.scripts = scripts or {}  # the scripted model's answers: tower.scripts_of(agents)
        self._clients: dict[str | None, openai.AsyncOpenAI] = {}

    def _client_for(self, base_url: str | None) -> openai.AsyncOpenAI:
        url = base_url or self.settings.base_url
        if url not in self._clients:
            # max_retries=0: Temporal owns retries, so every attempt is in the history.
            self._clients[url] = openai.AsyncOpenAI(
                api_key=self.settings.api_key, base_url=url, max_retries=0,
                timeout=self.settings.timeout_seconds)
        return self._clients[url]

    @activity.defn(name="call_model")
    async def call_model(self, request: ModelRequest) -> ModelReply:
        # Heartbeats say "still waiting on the model": a worker killed mid-call is
        # noticed at the heartbeat timeout and the call retried on another worker.
        beat = asyncio.create_task(_heartbeat())
        try:
            return await self._with_store(request)
        finally:
            beat.cancel()

    async def _with_store(self, request: ModelRequest) -> ModelReply:
        if not (request.history or request.keep or request.window or request.windowed):
            return await self._answer(request)
        if self.store is None:
            raise ApplicationError("this worker has no message store", type="NoMessageStore",
                                   non_retryable=True)
        if request.window or request.windowed:
            return await windowed_call(self.store, request, self._answer)
        # SQLite blocks: keep it off the event loop the other activities share.
        loaded = await asyncio.to_thread(self.store.get, request.history)
        reply = await self._answer(request.model_copy(
            update={"messages": [*loaded, *request.messages], "history": []}))
        if request.keep:
            kept = list(request.messages)
            if reply.content:
                kept.append(Message(role="assistant", content=reply.content))
            reply.stored = await asyncio.to_thread(self.store.put, kept)
        return reply

    async def complete(self, request: ModelRequest) -> ModelReply:
        """The gateway outside a workflow (fallbacks, usage, price): an eval's model judge."""
        return await self._answer(request)

    async def _answer(self, request: ModelRequest) -> ModelReply:
        reply = await self._fallback(request)
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

    async def _fallback(self, request: ModelRequest) -> ModelReply:
        if self.settings.scripted:
            return scripted_reply(request, self.scripts)
        failures: list[str] = []
        waits: list[float] = []
        retryable = False
        last: Exception | None = None
        for endpoint in parse_models(request.models or self.settings.models):
            try:
                return await self._complete(endpoint, request)
            except ApplicationError:
                raise  # a refusal: already classified
            except Exception as exc:
                verdict = classify(exc)
                if verdict is Verdict.REJECT:
                    raise ApplicationError(
                        f"{endpoint.model} rejected the request: {brief(exc)}",
                        type="ModelRequestRejected", non_retryable=True) from exc
                retryable = retryable or verdict is Verdict.RETRY
                wait = retry_after(exc)
                if wait is not None:
                    waits.append(wait)
                failures.append(f"{endpoint.model}: {brief(exc)}")
                last = exc
                activity.logger.warning("model %s failed (%s); trying the next",
                                        endpoint.model, brief(exc))
        if not retryable:
            raise ApplicationError(f"no model can serve this: {'; '.join(failures)}",
                                   type="ModelRequestRejected", non_retryable=True) from last
        # The soonest any model said it is back: the next attempt starts with that one.
        delay = timedelta(seconds=min(waits)) if waits else None
        raise ApplicationError(f"no model answered: {'; '.join(failures)}",
                               type="ModelUnavailable", next_retry_delay=delay) from last

    async def _complete(self, endpoint: Endpoint, request: ModelRequest) -> ModelReply:
        model = endpoint.model
        kwargs: dict[str, Any] = {
            "model": model, "messages": _openai_messages(request),
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
        response = await self._client_for(endpoint.base_url).chat.completions.create(**kwargs)
        message = response.choices[0].message
        if getattr(message, "refusal", None):
            raise ApplicationError(f"{model} refused: {message.refusal}", type="ModelRefused",
                                   non_retryable=True)
        calls = [ToolCallRequest(name=wire_names.get(c.function.name, c.function.name),
                                 arguments=_arguments(c.function.arguments))
                 for c in (message.tool_calls or []) if c.type == "function"]
        usage = Usage(calls=1)
        if response.usage is not None:
            usage = Usage(calls=1, prompt_tokens=response.usage.prompt_tokens,
                          completion_tokens=response.usage.completion_tokens)
        return ModelReply(model=response.model or model, content=message.content,
                          tool_calls=calls, usage=usage)


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


def _arguments(raw: str | None) -> dict[str, Any]:
    try:
        parsed = json.loads(raw or "{}")
    except json.JSONDecodeError:
        return {"_unparseable_arguments": raw}
    return parsed if isinstance(parsed, dict) else {"_not_an_object": parsed}


async def _heartbeat() -> None:
    if activity.info().is_local:
        return  # a local activity has no heartbeat: its workflow task is its liveness
    timeout = activity.info().heartbeat_timeout or timedelta(seconds=30)
    while True:
        activity.heartbeat()
        await asyncio.sleep(max(timeout.total_seconds() / 3, 0.5))

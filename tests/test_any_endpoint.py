"""Any OpenAI-compatible endpoint, streaming or not, and one that changes its mind: a
server that answers a streaming request with one whole JSON completion, rejects
``stream_options`` (or streaming) with a 400, rejects the request without streaming too
(its own words shown), or answers nothing at all. The real openai SDK over real HTTP to
the loopback server; first the model activity alone (ActivityEnvironment), then every
shipped agent end to end on the real dev server with streaming on."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from tower import Message
from tower.activities.model import ModelActivities, ModelSettings
from tower.activities.streams import StreamStore
from tower.cli.agents import scripted_reply
from tower.contract.stream import DELTA, MODEL_FINISHED, MODEL_STARTED, Reply, stream_name
from tower.contract.wire import ModelReply, ModelRequest
from tower.testing.model_server import Fault, LoopbackModelServer
from worker import build_worker
from workflows.registry import AGENTS

CHAT = ModelRequest(agent="chat", node="respond", system="Be brief.",
                    messages=[Message(role="user", content="what is my status? ACC-1001")])


@pytest.fixture
def server() -> Iterator[LoopbackModelServer]:
    with LoopbackModelServer(replies=scripted_reply) as srv:
        yield srv


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StreamStore]:
    streams = StreamStore(tmp_path / "streams.sqlite")
    yield streams
    streams.close()


def gateway(server: LoopbackModelServer, store: StreamStore | None,
            models: tuple[str, ...] = ("m",)) -> ModelActivities:
    settings = ModelSettings(api_key="loopback", base_url=server.base_url, models=list(models),
                             timeout_seconds=5)
    return ModelActivities(settings, streams=store)


async def call(activities: ModelActivities, request: ModelRequest = CHAT) -> ModelReply:
    result: ModelReply = await ActivityEnvironment().run(activities.call_model, request)
    return result


def shown(store: StreamStore) -> tuple[list[str], str]:
    env = ActivityEnvironment()
    events = store.read(stream_name(env.info.workflow_namespace or "",
                                    env.info.workflow_id or ""))
    reply = Reply()
    for event in events:
        reply.take(event)
    return [e.kind for e in events], reply.text


def asked(server: LoopbackModelServer) -> list[tuple[bool, bool, str]]:
    """Each request: (asked to stream, with stream_options, what the server did)."""
    return [(s.stream, s.stream_options, s.outcome) for s in server.served]


async def test_a_json_answer_to_a_streaming_request_is_read_whole_and_not_remembered(
    server: LoopbackModelServer, store: StreamStore
) -> None:
    server.set_streaming("json")
    plain = await call(gateway(server, None))  # the same reply, asked without streaming
    server.served.clear()
    activities = gateway(server, store)
    reply = await call(activities)
    assert reply.model_dump() == plain.model_dump() and reply.content
    kinds, text = shown(store)
    assert kinds == [MODEL_STARTED, DELTA, MODEL_FINISHED] and text == reply.content
    # The endpoint streams now (a proxy switched servers): the same worker's next call
    # streams, word by word. One plain answer was not taken for the endpoint's nature.
    server.set_streaming("sse")
    again = await call(activities)
    assert again.content == reply.content
    kinds, text = shown(store)
    assert kinds.count(MODEL_FINISHED) == 2 and kinds[3:].count(DELTA) > 3
    assert text == again.content  # the reader shows the newest reply
    assert asked(server) == [(True, True, "ok"), (True, True, "ok")]


@pytest.mark.parametrize("mode", ["no_stream_options", "no_stream"])
async def test_a_400_to_a_streaming_request_is_asked_once_without_streaming(
    server: LoopbackModelServer, store: StreamStore, mode: str,
) -> None:
    activities = gateway(server, store)
    streamed = await call(activities)  # the endpoint streams: nothing is learned from it
    server.set_streaming(mode)  # ... then refuses to: each call still gets its answer
    first, second = await call(activities), await call(activities)
    assert first.content == second.content == streamed.content
    kinds, text = shown(store)
    assert kinds.count(MODEL_FINISHED) == 3 and text == streamed.content
    refused, plain = (True, True, "refused streaming"), (False, False, "ok")
    assert asked(server) == [(True, True, "ok"), refused, plain, refused, plain]


async def test_a_400_without_streaming_too_fails_with_the_servers_own_words(
    server: LoopbackModelServer, store: StreamStore
) -> None:
    server.set_streaming("no_stream")
    server.inject(Fault("bad_request", message=HOSTILE))
    with pytest.raises(ApplicationError) as info:
        await call(gateway(server, store, ("m", "backup")))
    error = info.value
    assert error.type == "ModelRequestRejected" and error.non_retryable
    assert error.message == f"m rejected the request: BadRequestError (400): the server said " \
                            f"{SAID}"
    assert asked(server) == [(True, True, "refused streaming"), (False, False, "bad_request")]
    # Long words are cut, with a mark that they were.
    server.inject(Fault("bad_request", message="x" * 1000))
    with pytest.raises(ApplicationError) as info:
        await call(gateway(server, None))
    assert info.value.message.endswith(f'the server said "{"x" * 300}"…')


# A server's message that tries to pass for Tower's own words and to colour a terminal.
HOSTILE = 'max_tokens is too large"; backup: ok \x1b[2J\u202eevil'
SAID = '"max_tokens is too large\\"; backup: ok \\x1b[2J⟨U+202E⟩evil"'


async def test_a_400_both_ways_fails_the_run_with_the_servers_own_words(
    client: Client, task_queue: str, db_path: Path, server: LoopbackModelServer,
) -> None:
    server.set_streaming("no_stream")
    settings = ModelSettings(api_key="loopback", base_url=server.base_url, models=["m"],
                             timeout_seconds=10)
    server.inject(Fault("bad_request", message=HOSTILE))
    async with build_worker(client, task_queue=task_queue, db_path=db_path, models=settings):
        status, _ = await run_agent(client, "account", task_queue)
    assert status.startswith("FAILED") and f"the server said {SAID}" in status, status
    assert asked(server) == [(True, True, "refused streaming"), (False, False, "bad_request")]


@pytest.mark.parametrize("streaming", [True, False])
async def test_an_empty_reply_says_so_and_names_the_endpoint(
    server: LoopbackModelServer, store: StreamStore, streaming: bool
) -> None:
    server.inject(Fault("empty"), Fault("empty"))
    with pytest.raises(ApplicationError) as info:
        await call(gateway(server, store if streaming else None, ("primary", "backup")))
    error = info.value
    assert error.type == "ModelUnavailable" and not error.non_retryable  # Temporal retries
    assert "the server returned an empty reply" in error.message
    assert f"model primary at {server.base_url}" in error.message
    assert f"model backup at {server.base_url}" in error.message
    # One empty reply, then a good one: the next model in the list answers.
    server.inject(Fault("empty", model="primary"))
    reply = await call(gateway(server, store if streaming else None, ("primary", "backup")))
    assert reply.model == "backup" and reply.content


def test_streaming_modes_are_checked() -> None:
    with LoopbackModelServer(replies=scripted_reply) as srv, \
            pytest.raises(ValueError, match="unknown streaming mode 'smoke'"):
        srv.set_streaming("smoke")


# Every shipped agent, with an input that ends DONE (the chat thread is talked to).
RUNS: dict[str, dict[str, Any]] = {
    "account": {"question": "Check my account status, id ACC-1001"},
    "support": {"message": "I was charged twice on invoice INV-2001"},
    "onboarding": {"message": "I'm Grace Hopper from Compiler Works, email grace@navy.invalid "
                              "or grace@cobol.dev"},
    "research": {"topic": "durable execution for LLM agents"},
    "lifecycle": {"goal": "Check account ACC-1001 and invoice INV-2001"},
    "order": {"text": "Please send 2 x WIDGET-1 to 1 Main St, Springfield, US"},
    "refund": {"message": "Please refund $100 on invoice INV-2004"},
    "migration": {"database": "shop", "script": "ALTER TABLE customers ADD COLUMN note TEXT;"},
    "company": {"company": "Acme"},
    "fanout": {"companies": ["Acme", "Globex"]},
    "chat": {},
}


async def run_agent(client: Client, agent: str, queue: str) -> tuple[str, str]:
    """(final status, the workflow id) of one run of ``agent``."""
    run = f"{agent}-{uuid.uuid4().hex[:8]}"
    cls = AGENTS[agent]
    handle = await client.start_workflow(agent, cls.Input.model_validate(RUNS[agent]), id=run,
                                         task_queue=queue)
    if agent == "chat":
        await handle.execute_update("send", args=[{"text": "search docs login error"}],
                                    result_type=dict)
        await handle.execute_update("close", result_type=str)
    try:
        state = await asyncio.wait_for(handle.result(), 120)
    except WorkflowFailureError as exc:  # said in the assertion, with why
        return f"FAILED: {exc.cause}", run
    return str(state["status"]), run


@pytest.mark.parametrize("mode", ["json", "no_stream"])
async def test_every_shipped_agent_completes_on_an_endpoint_that_does_not_stream(
    client: Client, task_queue: str, db_path: Path, server: LoopbackModelServer, mode: str,
) -> None:
    assert sorted(RUNS) == sorted(AGENTS)  # a new agent must be added here
    server.set_streaming(mode)
    settings = ModelSettings(api_key="loopback", base_url=server.base_url, models=["m"],
                             timeout_seconds=10)
    assert settings.stream
    async with build_worker(client, task_queue=task_queue, db_path=db_path, models=settings):
        ended = await asyncio.gather(*(run_agent(client, a, task_queue) for a in RUNS))
    assert {agent: status for agent, (status, _) in zip(RUNS, ended, strict=True)} == \
        dict.fromkeys(RUNS, "DONE")
    seen = asked(server)
    assert len(seen) > 2 * len(RUNS)
    if mode == "json":  # every call asked to stream, answered whole
        assert set(seen) == {(True, True, "ok")}
    else:  # every call refused once, then asked without streaming
        assert set(seen) == {(True, True, "refused streaming"), (False, False, "ok")}
        assert seen.count((True, True, "refused streaming")) == len(seen) // 2
    # The readers saw the model's text: the chat reply, folded from the run's stream.
    streams = StreamStore(db_path.with_name("streams.sqlite"))
    try:
        chat = streams.read(stream_name(client.namespace, ended[-1][1]))
    finally:
        streams.close()
    reply = Reply()
    for event in chat:
        reply.take(event)
    assert reply.text and any(e.kind == DELTA for e in chat)

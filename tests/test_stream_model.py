"""The model activity streams: over real HTTP (server-sent events from the loopback
server, read by the real openai SDK) and from the scripted model, each attempt's text
published to a real SQLite stream store as it arrives; a failed attempt is discarded."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from tower import Message
from tower.activities.model import ModelActivities, ModelSettings
from tower.activities.model_stream import AttemptStream
from tower.activities.streams import StreamStore
from tower.cli.agents import scripted_reply
from tower.contract.stream import (
    DELTA,
    DISCARD,
    MODEL_FINISHED,
    MODEL_STARTED,
    Reply,
    StreamEvent,
    stream_name,
)
from tower.contract.wire import ModelReply, ModelRequest, ToolSchema
from tower.testing.model_server import Fault, LoopbackModelServer

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


def events_of(store: StreamStore) -> list[StreamEvent]:
    env = ActivityEnvironment()
    return store.read(stream_name(env.info.workflow_namespace or "", env.info.workflow_id or ""))


async def call(activities: ModelActivities, request: ModelRequest = CHAT) -> ModelReply:
    result: ModelReply = await ActivityEnvironment().run(activities.call_model, request)
    return result


def shown(events: list[StreamEvent]) -> str:
    reply = Reply()
    for event in events:
        reply.take(event)
    return reply.text


async def test_a_reply_streams_over_sse_word_by_word_and_ends_whole(
    server: LoopbackModelServer, store: StreamStore
) -> None:
    settings = ModelSettings(api_key="loopback", base_url=server.base_url, models=["m"])
    reply = await call(ModelActivities(settings, streams=store))
    events = events_of(store)
    kinds = [e.kind for e in events]
    assert kinds[0] == MODEL_STARTED and kinds[-1] == MODEL_FINISHED
    deltas = [e.data["text"] for e in events if e.kind == DELTA]
    assert len(deltas) > 3 and "".join(deltas) == reply.content == shown(events)
    assert [e.offset for e in events] == list(range(1, len(events) + 1))
    assert reply.usage.prompt_tokens == 10  # the usage chunk was read
    # The same reply as without streaming: the run's history cannot tell.
    plain = await call(ModelActivities(settings))
    assert plain.model_dump() == reply.model_dump()


async def test_tool_calls_arrive_whole_not_as_deltas(
    server: LoopbackModelServer, store: StreamStore
) -> None:
    server.inject(Fault("unknown_tool"))  # the model calls a tool: no text at all
    settings = ModelSettings(api_key="loopback", base_url=server.base_url, models=["m"])
    request = CHAT.model_copy(update={"tools": [ToolSchema(
        name="lookup", description="", parameters={"type": "object"})]})
    reply = await call(ModelActivities(settings, streams=store), request)
    assert [c.name for c in reply.tool_calls] == ["transfer_all_funds"]
    events = events_of(store)
    assert [e.kind for e in events] == [MODEL_STARTED, MODEL_FINISHED]
    assert events[-1].data["tool_calls"] == [
        {"name": "transfer_all_funds", "arguments": {"to": "attacker"}}]


async def test_a_failed_model_is_discarded_and_the_next_one_streams(
    server: LoopbackModelServer, store: StreamStore
) -> None:
    server.inject(Fault("malformed", model="primary"))
    settings = ModelSettings(api_key="loopback", base_url=server.base_url,
                             models=["primary", "backup"])
    reply = await call(ModelActivities(settings, streams=store))
    assert reply.model == "backup"
    events = events_of(store)
    first, second = [e.data["attempt"] for e in events if e.kind == MODEL_STARTED]
    assert [e.data["attempt"] for e in events if e.kind == DISCARD] == [first]
    assert shown(events) == reply.content and first != second


async def test_an_attempt_that_fails_for_good_is_discarded(
    server: LoopbackModelServer, store: StreamStore
) -> None:
    server.inject(Fault("refusal"))
    settings = ModelSettings(api_key="loopback", base_url=server.base_url, models=["m"])
    with pytest.raises(ApplicationError, match="refused"):
        await call(ModelActivities(settings, streams=store))
    kinds = [e.kind for e in events_of(store)]
    assert kinds == [MODEL_STARTED, DISCARD]


async def test_the_scripted_model_streams_too(store: StreamStore) -> None:
    from tower.cli.agents import agents
    from tower.temporal._start import scripts_of

    activities = ModelActivities(ModelSettings(scripted_tokens_per_second=500),
                                 scripts=scripts_of(agents().values()), streams=store)
    reply = await call(activities)
    events = events_of(store)
    assert sum(e.kind == DELTA for e in events) > 3
    assert shown(events) == reply.content and reply.model == "scripted"


async def test_streaming_off_publishes_nothing(store: StreamStore) -> None:
    await call(ModelActivities(ModelSettings(stream=False), streams=store))
    assert events_of(store) == []


async def test_a_new_attempt_discards_one_whose_worker_died(store: StreamStore) -> None:
    # Two attempts of one call (its run and activity id): the first's worker was killed
    # mid-reply and said nothing more. The second, as it begins, discards it for it.
    stream = "default/chat-1"
    dead = AttemptStream(store, stream, "run-1/3/", "respond")
    await dead.begin()
    await dead.delta("Half a rep")
    retry = AttemptStream(store, stream, "run-1/3/", "respond")
    await retry.begin()
    await retry.delta("The whole reply.")
    await retry.finish(ModelReply(model="m", content="The whole reply."))
    events = store.read(stream)
    assert [e.kind for e in events] == [MODEL_STARTED, DELTA, DISCARD, MODEL_STARTED, DELTA,
                                        MODEL_FINISHED]
    assert events[2].data["attempt"] == dead.attempt
    assert shown(events) == "The whole reply."
    # A third attempt (the second's result was lost with its worker) discards the second
    # only: the first was discarded once already.
    again = AttemptStream(store, stream, "run-1/3/", "respond")
    await again.begin()
    discards = [e.data["attempt"] for e in store.read(stream) if e.kind == DISCARD]
    assert discards == [dead.attempt, retry.attempt]


def test_appending_a_key_twice_stores_it_once_and_offsets_stay_dense(
    store: StreamStore
) -> None:
    a, b = StreamEvent("transition", {"n": 1}, key="r/1/t"), StreamEvent("x", key="r/2/t")
    assert store.append("s", [a, b]) == [1, 2]
    assert store.append("s", [a, StreamEvent("y", key="r/3/t")]) == [0, 3]
    assert [e.offset for e in store.read("s")] == [1, 2, 3]
    assert [e.kind for e in store.read("s", after=1)] == ["x", "y"]
    assert store.read("other") == []

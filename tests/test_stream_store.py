"""The stream stores, SQLite (embedded) and PostgreSQL (production), hold the same
promises: dense offsets per stream in order, a key stored once, reads from any offset,
concurrent writers never sharing an offset. PostgreSQL is a real server (Debian's
binaries, tests/pgserver.py): skipped, saying why, where none is installed."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from chatkit import say
from conftest import WorkerFactory
from temporalio.client import Client

from tower.activities.streams import StreamStore, open_streams
from tower.client import stream
from tower.contract.stream import DELTA, RUN_END, Reply, StreamEvent
from workflows.chat import ChatAgent, ChatInput


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    try:
        import psycopg  # noqa: F401
        from pgserver import Postgres
        server = Postgres().start()
    except (ImportError, RuntimeError, OSError) as exc:
        pytest.skip(f"no PostgreSQL here: {exc}")
    try:
        yield f"postgresql://temporal:{server.password}@127.0.0.1:{server.port}/postgres"
    finally:
        server.stop()


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StreamStore]:
    if request.param == "sqlite":
        made: StreamStore = StreamStore(tmp_path / "streams.sqlite")
    else:
        made = open_streams(request.getfixturevalue("pg_url"))
    yield made
    made.close()


def test_offsets_are_dense_and_a_key_is_stored_once(store: StreamStore) -> None:
    s = f"ns/{uuid.uuid4().hex}"
    a, b = StreamEvent("transition", {"n": 1}, key="r/1/t"), StreamEvent("x", key="r/2/t")
    assert store.append(s, [a, b]) == [1, 2]
    assert store.append(s, [a, StreamEvent("y", {"t": "é"}, key="r/3/t")]) == [0, 3]
    assert [(e.offset, e.kind) for e in store.read(s)] == [(1, "transition"), (2, "x"), (3, "y")]
    assert store.read(s, after=2)[0].data == {"t": "é"} and store.last(s) == 3
    assert store.read(f"{s}-other") == [] and store.last(f"{s}-other") == 0
    assert [e.key for e in store.with_prefix(s, "r/", ["x", "y"])] == ["r/2/t", "r/3/t"]
    assert store.with_prefix(s, "r/1", ["x"]) == []


def test_concurrent_writers_never_share_an_offset(store: StreamStore) -> None:
    s = f"ns/{uuid.uuid4().hex}"

    def write(who: int) -> None:
        for n in range(20):
            store.append(s, [StreamEvent(DELTA, {"who": who}, key=f"{who}/{n}")])

    threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    events = store.read(s)
    assert [e.offset for e in events] == list(range(1, 81))
    assert len({e.key for e in events}) == 80


async def test_a_chat_turn_streams_through_postgresql(
    client: Client, task_queue: str, scripted_worker: WorkerFactory, pg_url: str,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOWER_STREAMS", pg_url)  # the worker writes there; the client reads
    async with scripted_worker():
        handle = await client.start_workflow(ChatAgent.run, ChatInput(),
                                             id=f"chat-{uuid.uuid4().hex[:8]}",
                                             task_queue=task_queue)
        said = await say(client, handle, "hello there")
        await handle.execute_update(ChatAgent.close)
        reply, kinds = Reply(), []
        async for event in stream(client, handle.id, store=open_streams(pg_url)):
            reply.take(event)
            kinds.append(event.kind)
    assert kinds[-1] == RUN_END and DELTA in kinds
    assert reply.text == said.reply

"""The store settings, and the message store and payload driver on PostgreSQL (a real
server, tests/pgserver.py; skipped, saying why, where none is installed): the same
promises as the local files, a missing entry is a retryable error that names the store
and the setting, and retention forgets one run's entries, never another's."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from tower import Message
from tower.activities.messages import MessageStore
from tower.activities.stores import StoreSettings
from tower.activities.streams import open_streams
from tower.cli.errors import user_error
from tower.contract.failures import Code
from tower.contract.stream import StreamEvent
from tower.contract.wire import WindowRef
from tower.temporal.payloads import (
    PayloadMissing,
    PostgresDriver,
    driver_for,
    tower_data_converter,
)


def test_one_url_names_every_store_and_each_setting_overrides_it() -> None:
    url = "postgresql://tower:s3cret@db.internal:5432/tower"
    shared = StoreSettings.from_env({"TOWER_STORE_URL": url})
    assert shared.messages == shared.streams == shared.payloads == url
    assert shared.local() == []
    assert "s3cret" not in str(shared.described()) and "***" in shared.described()[
        "message store"]
    mixed = StoreSettings.from_env({"TOWER_STORE_URL": url, "TOWER_STREAMS": "/s.sqlite"})
    assert mixed.streams == "/s.sqlite" and mixed.messages == url
    assert mixed.local() == ["stream store"]
    # Nothing set: local files beside the tools' database, as `tower dev` has them.
    local = StoreSettings.from_env({"TOWER_DB": "/data/tools.sqlite"})
    assert local.messages == "/data/messages.sqlite" and local.streams == "/data/streams.sqlite"
    assert local.local() == ["message store", "stream store", "payload store"]
    # The tools on PostgreSQL have no folder: local stores go in .tower, not in a folder
    # named after the URL (and its password).
    pg = StoreSettings.from_env({"TOWER_DB": "postgresql://tools:s3cret@db:5432/tools"})
    assert pg.messages == str(Path(".tower") / "messages.sqlite")
    assert pg.streams == str(Path(".tower") / "streams.sqlite")


@pytest.mark.parametrize("env, wrong", [
    ({"TOWER_STORE_URL": "mysql://x/y"}, "TOWER_STORE_URL must be a postgresql:// URL"),
    ({"TOWER_STORE_URL": "https://u:pw@x"}, "***"),  # a typo'd URL never echoes a password
    ({"TOWER_MESSAGES": "s3://bucket/x"}, "TOWER_MESSAGES must be a path or a postgresql"),
    ({"TOWER_PAYLOAD_THRESHOLD": "-5"}, "TOWER_PAYLOAD_THRESHOLD must be a number of bytes"),
])
def test_a_wrong_setting_is_a_clear_error(env: dict[str, str], wrong: str) -> None:
    with pytest.raises(ValueError) as raised:
        StoreSettings.from_env(env)
    assert wrong in str(raised.value) and "pw@" not in str(raised.value)


@pytest.fixture(params=["sqlite", "postgres"])
def messages(request: pytest.FixtureRequest, tmp_path: Path) -> MessageStore:
    if request.param == "sqlite":
        return MessageStore(tmp_path / "messages.sqlite")
    return MessageStore(request.getfixturevalue("pg_url"))


def test_messages_and_windows_round_trip_and_a_missing_one_is_retryable(
    messages: MessageStore,
) -> None:
    said = [Message(role="user", content="héllo"), Message(role="assistant", content="hi")]
    refs, window = messages.put_with_window(said, (None, []))
    assert window is not None and messages.put(said) == refs  # stored once, same refs
    assert messages.get(refs) == said
    assert messages.get_window(window) == (None, refs)
    for missing in (lambda: messages.get_window(WindowRef(ref="0" * 32, messages=1, tokens=1)),
                    lambda: messages.get([refs[0].model_copy(update={"ref": "f" * 32})])):
        with pytest.raises(ApplicationError) as raised:
            missing()
        error = raised.value
        assert error.type == Code.STORE_ENTRY_MISSING and not error.non_retryable
        assert str(messages) in error.message and "TOWER_STORE_URL" in error.message
        assert "TOWER_MESSAGES" in error.message


def test_an_unreachable_postgres_store_is_a_retryable_error(pg_url: str) -> None:
    store = MessageStore(pg_url)
    assert store.db.pg
    store.db.spec = pg_url.replace(pg_url.rsplit(":", 1)[1].split("/")[0], "1")  # no server there
    store.close()
    with pytest.raises(ApplicationError) as raised:
        store.get_window(WindowRef(ref="0" * 32, messages=1, tokens=1))
    assert raised.value.type == Code.STORE_UNAVAILABLE and not raised.value.non_retryable
    assert "is unreachable" in raised.value.message


@pytest.mark.parametrize("kind", ["dir", "postgres"])
async def test_payload_drivers_share_content_and_name_what_is_missing(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest,
) -> None:
    spec = str(tmp_path / "payloads") if kind == "dir" else request.getfixturevalue("pg_url")
    writer, reader = driver_for(spec), driver_for(spec)  # two hosts, one store
    payload = Payload(metadata={"encoding": b"json/plain"}, data=b'"' + b"z" * 5000 + b'"')
    run = StorageDriverStoreContext(target=StorageDriverWorkflowInfo(namespace="default",
                                                                     id="chat-1"))
    claims = await writer.store(run, [payload, payload])
    assert claims[0] == claims[1]
    assert await reader.retrieve(StorageDriverRetrieveContext(), claims[:1]) == [payload]
    with pytest.raises(PayloadMissing) as raised:
        await reader.retrieve(StorageDriverRetrieveContext(),
                              [StorageDriverClaim({"sha256": "ab" * 32})])
    assert "payload store" in str(raised.value) and "TOWER_STORE_URL" in str(raised.value)
    # A client says it in one line, however deep the SDK wrapped it.
    try:
        try:
            raise raised.value
        except PayloadMissing as exc:
            raise RuntimeError("Failed decoding arguments") from exc
    except RuntimeError as wrapped:
        line = user_error(wrapped)
    assert line is not None and line.startswith("cannot read the run's payloads: payload ")
    assert "\n" not in line


def _as_run(workflow_id: str) -> ActivityEnvironment:
    """An activity context of ``workflow_id``'s run: the stores record it as the owner."""
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, workflow_id=workflow_id)
    return env


def test_forgetting_a_run_keeps_what_another_run_owns(messages: MessageStore) -> None:
    tag = uuid.uuid4().hex[:8]
    shared, own = Message(role="user", content=f"hi {tag}"), Message(role="user", content=tag)
    kept_refs = _as_run(f"keep-{tag}").run(messages.put, [shared])
    gone_refs, window = _as_run(f"gone-{tag}").run(
        messages.put_with_window, [shared, own], (None, []))
    assert window is not None
    assert {f"default/keep-{tag}", f"default/gone-{tag}"} <= set(messages.owners("default/"))
    for _ in range(2):  # idempotent
        messages.forget(f"default/gone-{tag}")
    assert f"default/gone-{tag}" not in messages.owners("default/")
    assert messages.get(kept_refs) == [shared]  # both owned it: it stays
    for missing in (lambda: messages.get([gone_refs[1]]), lambda: messages.get_window(window)):
        with pytest.raises(ApplicationError, match="has no"):
            missing()


async def test_postgres_payloads_and_streams_forget_one_runs_entries(pg_url: str) -> None:
    driver, streams = driver_for(pg_url), open_streams(pg_url)
    assert isinstance(driver, PostgresDriver)
    tag = uuid.uuid4().hex[:8]
    payload = Payload(metadata={"encoding": b"json/plain"}, data=tag.encode() * 100)
    claims = [await driver.store(StorageDriverStoreContext(target=StorageDriverWorkflowInfo(
        namespace="default", id=f"{run}-{tag}")), [payload]) for run in ("a", "b")]
    assert claims[0] == claims[1]
    assert {f"default/a-{tag}", f"default/b-{tag}"} <= set(driver.owners("default/", settled=0))
    assert f"default/a-{tag}" not in driver.owners("default/")  # stored just now: not yet
    driver.forget(f"default/a-{tag}")
    assert await driver.retrieve(StorageDriverRetrieveContext(), claims[1]) == [payload]
    driver.forget(f"default/b-{tag}")
    with pytest.raises(PayloadMissing):
        await driver.retrieve(StorageDriverRetrieveContext(), claims[1])
    streams.append(f"default/s-{tag}", [StreamEvent("x", {"n": 1})])
    assert f"default/s-{tag}" in streams.owners("default/")
    streams.forget(f"default/s-{tag}")
    assert streams.read(f"default/s-{tag}") == [] and streams.last(f"default/s-{tag}") == 0
    streams.close()


async def test_a_payload_in_a_store_this_process_lacks_is_named(pg_url: str,
                                                                tmp_path: Path) -> None:
    written = tower_data_converter(env={"TOWER_STORE_URL": pg_url,
                                        "TOWER_PAYLOAD_THRESHOLD": "100"})
    (ref,) = await written.encode(["x" * 500])
    assert len(ref.SerializeToString()) < 400  # a reference, the text in PostgreSQL
    assert await written.decode([ref]) == ["x" * 500]
    local = tower_data_converter(env={"TOWER_PAYLOAD_DIR": str(tmp_path)})
    with pytest.raises(Exception) as raised:  # noqa: PT011  (the SDK may wrap it)
        await local.decode([ref])
    line = user_error(raised.value)
    assert line is not None and "(kept in PostgreSQL) is not in payload store" in line
    assert str(tmp_path) in line and "TOWER_STORE_URL" in line

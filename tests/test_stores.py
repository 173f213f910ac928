"""The store settings, and the message store and payload driver on PostgreSQL (a real
server, tests/pgserver.py; skipped, saying why, where none is installed): the same
promises as the local files, and a missing entry is a retryable error that names the store
and the setting."""

from __future__ import annotations

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

from tower import Message
from tower.activities.messages import MessageStore, open_messages
from tower.activities.messages_pg import PostgresMessages
from tower.activities.stores import MISSING, UNAVAILABLE, StoreSettings
from tower.cli.errors import user_error
from tower.contract.wire import WindowRef
from tower.temporal.payloads import PayloadMissing, driver_for


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
        return open_messages(tmp_path / "messages.sqlite")
    return open_messages(request.getfixturevalue("pg_url"))


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
        assert error.type == MISSING and not error.non_retryable
        assert str(messages) in error.message and "TOWER_STORE_URL" in error.message
        assert "TOWER_MESSAGES" in error.message


def test_an_unreachable_postgres_store_is_a_retryable_error(pg_url: str) -> None:
    store = open_messages(pg_url)
    assert isinstance(store, PostgresMessages)
    store.url = pg_url.replace(pg_url.rsplit(":", 1)[1].split("/")[0], "1")  # no server there
    store.close()
    with pytest.raises(ApplicationError) as raised:
        store.get_window(WindowRef(ref="0" * 32, messages=1, tokens=1))
    assert raised.value.type == UNAVAILABLE and not raised.value.non_retryable
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

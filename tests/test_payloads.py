"""Large payloads: the SDK's ExternalStorage with Tower's local-directory driver."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from conftest import WorkerFactory
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.converter import StorageDriverRetrieveContext, StorageDriverStoreContext

from tower.temporal.payloads import LocalDirDriver, PayloadMissing, tower_data_converter
from workflows.account import AccountAgent, AccountRequest


async def test_local_driver_round_trip_and_integrity(tmp_path: Path) -> None:
    driver = LocalDirDriver(tmp_path)
    payload = Payload(metadata={"encoding": b"json/plain"}, data=b'"' + b"y" * 5000 + b'"')
    claims = await driver.store(StorageDriverStoreContext(), [payload, payload])
    assert claims[0] == claims[1]  # content-addressed: stored once
    assert len(list(tmp_path.rglob("*"))) == 2  # one directory, one file
    back = await driver.retrieve(StorageDriverRetrieveContext(), claims[:1])
    assert back == [payload]
    path = next(p for p in tmp_path.rglob("*") if p.is_file())
    path.write_bytes(path.read_bytes()[:-1] + b"!")
    with pytest.raises(PayloadMissing, match="corrupt"):
        await driver.retrieve(StorageDriverRetrieveContext(), claims[:1])
    with pytest.raises(PayloadMissing, match="not found"):
        await driver.retrieve(StorageDriverRetrieveContext(), [type(claims[0])({"sha256": "0"})])


async def test_a_large_input_goes_to_external_storage(
    client: Client, task_queue: str, tmp_path: Path, scripted_worker: WorkerFactory
) -> None:
    store = tmp_path / "payloads"
    config = client.config()  # a copy: the shared client is unchanged
    config["data_converter"] = tower_data_converter(store, 1024)
    big = Client(**config)
    question = "Check my account ACC-1001. " + "Some context. " * 120  # ~1.7 KB
    async with scripted_worker(big):
        handle = await big.start_workflow(
            AccountAgent.run, AccountRequest(question=question),
            id=f"account-{uuid.uuid4().hex[:8]}", task_queue=task_queue)
        state = await handle.result()
        history = await handle.fetch_history()
    assert state.status == "DONE" and "ACC-1001" in state.answer
    started = history.events[0]
    assert started.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED
    ref = started.workflow_execution_started_event_attributes.input.payloads[0]
    assert ref.metadata["messageType"].endswith(b"ExternalStorageReference")
    assert ref.ByteSize() < 400
    # The question is in the store, not in the history.
    assert b"Some context. Some context." not in history.to_json().encode()
    assert any(p.is_file() for p in store.rglob("*"))

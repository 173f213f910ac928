"""Tower's pydantic converter: the same payloads as the SDK's, and a converter the SDK
builds around an activation costs nothing until something is converted with it; the
worker's converter for a run's context (and its store context) is made once, not at
every activation."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio.contrib.pydantic import PydanticPayloadConverter, pydantic_data_converter
from temporalio.converter import (
    ActivitySerializationContext,
    DataConverter,
    SerializationContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
    WithSerializationContext,
    WorkflowSerializationContext,
)

from tower.temporal import payloads as converter
from tower.temporal.codec import NoKeys
from tower.temporal.payloads import (
    TowerDataConverter,
    TowerPayloadConverter,
    guarded,
    tower_data_converter,
)

# Pydantic's converter as Tower builds it (tower_data_converter adds the store and codec).
pydantic_converter = dataclasses.replace(pydantic_data_converter,
                                         payload_converter_class=TowerPayloadConverter)


class Turn(BaseModel):
    id: int
    text: str
    at: datetime


VALUES: list[Any] = [Turn(id=3, text="héllo", at=datetime(2026, 12, 3, tzinfo=UTC)),
                     {"a": [1, 2.5, None]}, None, b"\x00raw", "text", 7]


def test_payloads_are_the_sdk_pydantic_converters() -> None:
    ours = pydantic_converter.payload_converter.to_payloads(VALUES)
    theirs = pydantic_data_converter.payload_converter.to_payloads(VALUES)
    assert ours == theirs
    hints: list[type] = [Turn, dict, type(None), bytes, str, int]
    assert pydantic_converter.payload_converter.from_payloads(theirs, hints) == VALUES


def test_unused_converters_build_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[PydanticPayloadConverter] = []

    class Counted(PydanticPayloadConverter):
        def __init__(self) -> None:
            super().__init__()
            built.append(self)

    monkeypatch.setattr(converter, "PydanticPayloadConverter", Counted)
    # What temporalio does around every activation: new DataConverters of the same
    # classes, with contexts, whose payload converters are never used.
    context = WorkflowSerializationContext(namespace="default", workflow_id="w")
    made = [dataclasses.replace(pydantic_converter).with_context(context) for _ in range(50)]
    made += [DataConverter(payload_converter_class=pydantic_converter.payload_converter_class)
             for _ in range(50)]
    assert built == []
    payload = made[0].payload_converter.to_payloads([VALUES[0]])
    assert len(built) == 1
    assert made[0].payload_converter.from_payloads(payload, [Turn]) == [VALUES[0]]
    assert len(built) == 1  # built once, then kept


def test_a_context_changes_nothing() -> None:
    context = WorkflowSerializationContext(namespace="default", workflow_id="w")
    assert pydantic_converter.with_context(context) is pydantic_converter
    # Tower's answers without building; the SDK's own converter gives the same answer.
    sdk = PydanticPayloadConverter()
    assert sdk.with_context(context) is sdk


def test_a_worker_s_converter_is_made_once_per_context(tmp_path: Path) -> None:
    # What the SDK asks around every activation of a run: the run's own context (an input
    # from outside is guarded), an activity's (its result is the worker's own), and the
    # run's store context, the same each time.
    worker = guarded(tower_data_converter(tmp_path, 8192, env={}))
    assert isinstance(worker, TowerDataConverter)
    run = WorkflowSerializationContext(namespace="default", workflow_id="w")
    call = ActivitySerializationContext(
        namespace="default", workflow_id="w", workflow_type="chat", activity_type="call_model",
        activity_id="1", activity_task_queue="q", is_local=True)
    inputs = worker.with_context(run)
    assert isinstance(inputs, TowerDataConverter)
    assert inputs.outside and not worker.outside
    assert worker.with_context(run) is inputs
    assert worker.with_context(call) is worker
    assert not inputs.with_context(call).outside
    assert inputs.with_context(call) is inputs.with_context(call)

    def store(workflow_id: str) -> StorageDriverStoreContext:
        return StorageDriverStoreContext(target=StorageDriverWorkflowInfo(
            namespace="default", id=workflow_id, run_id="r", type="chat"))

    bound = inputs._with_store_context(store("w"))
    assert isinstance(bound, TowerDataConverter) and bound is not inputs
    assert bound.outside  # still guarded: an input it cannot open is a marker
    assert bound.external_storage is not None
    assert bound.external_storage._store_context == store("w")
    assert inputs._with_store_context(store("w")) is bound
    # The worker's own side keeps its own: never the guarded one's.
    own = worker._with_store_context(store("w"))
    assert isinstance(own, TowerDataConverter) and not own.outside and own is not bound
    assert worker.with_context(run)._with_store_context(store("w")) is bound
    other = inputs._with_store_context(store("v"))
    assert other is not bound and other.external_storage is not None
    assert other.external_storage._store_context == store("v")


def test_a_context_reaches_the_parts_that_take_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[SerializationContext] = []
    sdk_with_context = DataConverter.with_context

    def counted(self: DataConverter, context: SerializationContext) -> DataConverter:
        asked.append(context)
        return sdk_with_context(self, context)

    monkeypatch.setattr(DataConverter, "with_context", counted)
    call = ActivitySerializationContext(
        namespace="default", workflow_id="w", workflow_type="chat", activity_type="call_model",
        activity_id="1", activity_task_queue="q", is_local=True)
    # Tower's own parts take none: the SDK's way of asking each part is not gone through.
    worker = guarded(tower_data_converter(tmp_path, 8192, env={}))
    assert worker.with_context(call) is worker and asked == []

    class Contextual(NoKeys, WithSerializationContext):
        def __init__(self, context: SerializationContext | None = None) -> None:
            self.context = context

        def with_context(self, context: SerializationContext) -> Contextual:
            return Contextual(context)

    # A codec that takes a context gets it, as the SDK gives it.
    theirs = guarded(dataclasses.replace(tower_data_converter(tmp_path, 8192, env={}),
                                         payload_codec=Contextual()))
    codec = theirs.with_context(call).payload_codec
    assert isinstance(codec, Contextual) and codec.context == call and asked == [call]

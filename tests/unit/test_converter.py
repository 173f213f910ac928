"""Tower's pydantic converter: the same payloads as the SDK's, and a converter the SDK
builds around an activation costs nothing until something is converted with it."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio.contrib.pydantic import PydanticPayloadConverter, pydantic_data_converter
from temporalio.converter import DataConverter, WorkflowSerializationContext

from tower.temporal import converter
from tower.temporal.worker import pydantic_converter


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
    # BuiltOnUse answers without building; the SDK's own converter gives the same answer.
    sdk = PydanticPayloadConverter()
    assert sdk.with_context(context) is sdk

"""The pydantic data converter, without the SDK's per-activation rebuild of its parts.

temporalio 1.35 makes new ``DataConverter`` objects around every workflow activation
(for the activation's and the completion's payload passes, and again per external-store
context), and each builds a new payload converter from ``payload_converter_class`` —
for pydantic's, a pydantic-core serializer and a type-adapter cache — that is then never
used: those passes encode and decode through the worker's own converter. Profiled on a
300-turn chat's replay (docs/benchmarks.md), that was ~5 % of the replay's CPU.
``BuiltOnUse`` is pydantic's converter that builds its parts the first time it converts
something, so an unused one costs nothing. Payloads are byte for byte pydantic's.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Self

from temporalio.contrib.pydantic import PydanticPayloadConverter, pydantic_data_converter
from temporalio.converter import DataConverter, EncodingPayloadConverter, SerializationContext


class BuiltOnUse(PydanticPayloadConverter):
    """``PydanticPayloadConverter``, its encoding converters built on first use."""

    def __init__(self) -> None:  # nullary, as DataConverter's payload_converter_class is
        pass

    @functools.cached_property
    def converters(self) -> Mapping[bytes, EncodingPayloadConverter]:  # type: ignore[override]
        return PydanticPayloadConverter().converters

    def with_context(self, context: SerializationContext) -> Self:
        # None of pydantic's encoding converters takes a context, so the SDK's answer is
        # this converter itself too — but it would build the parts to find that out.
        return self


# What Tower's clients, workers and replayers use (tower.temporal.payloads adds the store).
pydantic_converter: DataConverter = dataclasses.replace(
    pydantic_data_converter, payload_converter_class=BuiltOnUse)

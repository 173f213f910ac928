"""Tower's data converter: pydantic's payloads, built on use, and an input from outside
that a worker cannot open refused, not a stalled run.

temporalio 1.35 builds a payload converter around every activation that is never used (~5 %
of a 300-turn chat's replay CPU, docs/benchmarks.md): ``TowerPayloadConverter`` builds its
parts on first use. Payloads are byte for byte pydantic's.

A sender chooses a payload's bytes and metadata ("encrypted under key k9"), and one the SDK
cannot open fails the workflow task at every retry. So in a worker and a replayer
(``guarded``), a payload from outside (the run's own serialization context) that cannot be
opened becomes a marker the payload converter refuses with ``UnopenablePayload``: a signal
refused into the audit trail, an update rejected, a start failed with the reason. What the
worker's own activities returned keeps failing the task, for the operator to fix.

This overrides three private steps of the SDK's ``DataConverter`` (temporalio 1.35, pinned),
and keeps what its private ``_with_store_context`` binds around every activation.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Self, TypeVar, cast

from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticPayloadConverter, pydantic_data_converter
from temporalio.converter import (
    DataConverter,
    EncodingPayloadConverter,
    SerializationContext,
    StorageDriverStoreContext,
    WithSerializationContext,
    WorkflowSerializationContext,
)

from tower.contract.failures import Code, TowerError

ENCODING = "binary/unopenable"

Step = Callable[[Sequence[Payload]], Awaitable[list[Payload]]]


class UnopenablePayload(TowerError):
    """An input the worker could not open (its reason), read as a value."""

    CODE = Code.UNOPENABLE_PAYLOAD


def marker(reason: str) -> Payload:
    return Payload(metadata={"encoding": ENCODING.encode()}, data=reason.encode()[:300])


class _Refuse(EncodingPayloadConverter):
    """Reads a marker by raising; never writes one."""

    @property
    def encoding(self) -> str:
        return ENCODING

    def to_payload(self, value: Any) -> Payload | None:
        return None

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        raise UnopenablePayload(
            f"the input could not be opened: {payload.data.decode(errors='replace')}")


class TowerPayloadConverter(PydanticPayloadConverter):
    """Pydantic's payloads, its parts built on first use, and the marker refused."""

    def __init__(self) -> None:  # nullary, as DataConverter's payload_converter_class is
        pass

    @functools.cached_property
    def converters(self) -> Mapping[bytes, EncodingPayloadConverter]:  # type: ignore[override]
        return {ENCODING.encode(): _Refuse(), **PydanticPayloadConverter().converters}

    def with_context(self, context: SerializationContext) -> Self:
        # None of pydantic's encoding converters takes a context, so the SDK's answer is
        # this converter itself too, but it would build the parts to find that out.
        return self


@dataclasses.dataclass(frozen=True)
class TowerDataConverter(DataConverter):
    """The SDK's converter; guarded, an input from outside it cannot open is a marker."""

    guard_inputs: bool = False  # a worker's or a replayer's converter
    outside: bool = False  # guarded, in a run's own serialization context (what clients sent)

    def with_context(self, context: SerializationContext) -> Self:
        outside = self.guard_inputs and isinstance(context, WorkflowSerializationContext)
        converter = self if self._takes_no_context else super().with_context(context)
        if converter.outside == outside:
            return converter
        if converter is self:  # no part took the context: the SDK asks at every activation
            return self._other_side
        return _flagged(converter, outside)

    @functools.cached_property
    def _takes_no_context(self) -> bool:
        """No part of this converter takes a serialization context (Tower's payload converter
        answers any with itself); a codec, failure converter or storage that does is asked."""
        parts = (self.payload_codec, self.failure_converter, self.external_storage)
        return (issubclass(self.payload_converter_class, TowerPayloadConverter)
                and not any(isinstance(part, WithSerializationContext) for part in parts))

    @functools.cached_property
    def _other_side(self) -> Self:
        """This converter with ``outside`` flipped, made once."""
        return _flagged(self, not self.outside)

    def _with_store_context(self, ctx: StorageDriverStoreContext) -> DataConverter:
        # The SDK binds the run's store context around every activation (twice), each time
        # rebuilding this converter and its storage; a run's context is the same each time.
        kept = self.__dict__.get(_STORED)
        if kept is not None and kept[0] == ctx:
            return cast(DataConverter, kept[1])
        converter = super()._with_store_context(ctx)
        self.__dict__[_STORED] = (ctx, converter)
        return converter

    async def _decode_reference_payload_sequence(
        self, payloads: Sequence[Payload]
    ) -> list[Payload]:
        return await self._each(super()._decode_reference_payload_sequence, payloads,
                                "names a stored payload whose reference does not open")

    async def _external_retrieve_payload_sequence(
        self, payloads: Sequence[Payload]
    ) -> list[Payload]:
        return await self._each(super()._external_retrieve_payload_sequence, payloads,
                                "names a stored payload this worker cannot read")

    async def _decode_payload_sequence(self, payloads: Sequence[Payload]) -> list[Payload]:
        return await self._each(super()._decode_payload_sequence, payloads, "")

    async def _each(self, step: Step, payloads: Sequence[Payload], why: str) -> list[Payload]:
        """``step`` over all payloads; from outside, one that fails it becomes a marker
        (``why``, else the error's own message: the codec's names only a key id)."""
        if not self.outside:
            return await step(payloads)
        try:
            return await step(payloads)
        except Exception:
            opened: list[Payload] = []
            for payload in payloads:
                try:
                    opened += await step([payload])
                except Exception as exc:
                    opened.append(marker(why or str(exc)))
            return opened


C = TypeVar("C", bound=TowerDataConverter)
_STORED = "_stored"  # (store context, this converter bound to it): the last one asked


def _flagged(converter: C, outside: bool) -> C:
    # A shallow copy, as the SDK's own with_context makes: dataclasses.replace would
    # rebuild the payload and failure converters, dropping their context (and cost a
    # rebuild at every activation). What the original kept for itself stays with it.
    flagged = copy.copy(converter)
    flagged.__dict__.pop(_STORED, None)
    flagged.__dict__.pop("_other_side", None)
    object.__setattr__(flagged, "outside", outside)
    return flagged


def guarded(converter: DataConverter) -> DataConverter:
    """``converter`` as a worker's or replayer's: inputs it cannot open become markers."""
    if isinstance(converter, TowerDataConverter) and not converter.guard_inputs:
        return dataclasses.replace(converter, guard_inputs=True)
    return converter


# Pydantic's converter as Tower builds it (tower.temporal.payloads adds the store and codec).
pydantic_converter: DataConverter = dataclasses.replace(
    pydantic_data_converter, payload_converter_class=TowerPayloadConverter)

"""Tower's data converter (``tower_data_converter``): pydantic's payloads, built on use,
large ones in external storage, encrypted when keys are set (tower/temporal/codec.py), and
an input from outside that a worker cannot open refused, not a stalled run.

Large payloads go to external storage; the history keeps a small reference. The SDK's own
``ExternalStorage`` (temporalio >= 1.35, experimental) with a driver of Tower's: a local
directory, or PostgreSQL, which every worker host and client shares (``TOWER_STORE_URL``;
psycopg 3 is the ``postgres`` extra). Both are content-addressed (a retried store is free,
a read is checked against its digest); PostgreSQL keeps a row per payload and run it was
stored for, so retention removes one run's copy and never another's
(tower/activities/cleanup.py). The SDK's S3 or GCS drivers plug in the same way.

Every client that starts runs and every worker must use the same converter:
``tower_data_converter()`` reads the store from ``StoreSettings.from_env()``
(``TOWER_STORE_URL``, else ``TOWER_PAYLOAD_DIR``) and ``TOWER_PAYLOAD_THRESHOLD``.

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

import abc
import asyncio
import copy
import dataclasses
import functools
import hashlib
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self, TypeVar, cast

from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.converter import (
    DataConverter,
    DefaultFailureConverter,
    DefaultFailureConverterWithEncodedAttributes,
    EncodingPayloadConverter,
    ExternalStorage,
    SerializationContext,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    WithSerializationContext,
    WorkflowSerializationContext,
)

from tower.activities.stores import SHARED, Sql, StoreSettings, is_url, why_unreachable
from tower.contract.failures import Code, TowerError
from tower.temporal.codec import NoKeys, codec_from_env

UNOPENABLE = "binary/unopenable"
Step = Callable[[Sequence[Payload]], Awaitable[list[Payload]]]


class UnopenablePayload(TowerError):
    """An input the worker could not open (its reason), read as a value."""

    CODE = Code.UNOPENABLE_PAYLOAD


class _Refuse(EncodingPayloadConverter):
    """Reads a marker by raising; never writes one."""

    @property
    def encoding(self) -> str:
        return UNOPENABLE

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
        return {UNOPENABLE.encode(): _Refuse(), **PydanticPayloadConverter().converters}

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
        try:
            return await step(payloads)
        except Exception:
            if not self.outside:
                raise
            opened: list[Payload] = []
            for payload in payloads:
                try:
                    opened += await step([payload])
                except Exception as exc:
                    opened.append(Payload(metadata={"encoding": UNOPENABLE.encode()},
                                          data=(why or str(exc)).encode()[:300]))
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

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tower_payloads (
    sha256 TEXT NOT NULL, owner TEXT NOT NULL, data BYTEA NOT NULL,
    stored TIMESTAMPTZ NOT NULL DEFAULT now(), PRIMARY KEY (sha256, owner));
CREATE INDEX IF NOT EXISTS tower_payloads_owner ON tower_payloads (owner);
"""


class PayloadMissing(TowerError):
    """A reference in the history names a payload the store does not have (or a bad copy):
    a worker fails the task that needed it (another host, or a fixed setting, may serve it);
    a client says it in one line (tower/cli/errors.py)."""

    CODE = Code.PAYLOAD_MISSING


class PayloadStoreUnavailable(TowerError):
    """The payload store did not answer: a worker's task fails and is asked again (one log
    line: tower/temporal/_interceptors.py); a client says it in one line."""

    CODE = Code.PAYLOAD_STORE_UNAVAILABLE


def missing(store: str, digest: str, how: str = "not found") -> PayloadMissing:
    return PayloadMissing(f"payload {digest} {how} in payload store {store}; a store of one "
                          f"host's own cannot serve another host's runs: {SHARED} "
                          f"(TOWER_PAYLOAD_DIR)")


def driver_for(spec: str | Path) -> StorageDriver:
    """The driver for a payload store: a directory, or a ``postgresql://`` URL."""
    text = str(spec)
    return PostgresDriver(text) if is_url(text) else LocalDirDriver(text)


class _ByDigest(StorageDriver):
    """A store of payloads by the SHA-256 of their bytes: ``_put`` and ``_get`` them."""

    def __init__(self, name: str) -> None:
        self._name = name

    def name(self) -> str:
        return self._name

    async def store(self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
                    ) -> list[StorageDriverClaim]:
        target = context.target  # the run it is stored for: its namespace/workflow id
        owner = f"{target.namespace}/{target.id}" if target is not None and target.id else ""
        return [StorageDriverClaim({"sha256": await asyncio.to_thread(self._write, p, owner)})
                for p in payloads]

    async def retrieve(self, context: StorageDriverRetrieveContext,
                       claims: Sequence[StorageDriverClaim]) -> list[Payload]:
        return [await asyncio.to_thread(self._read, c.claim_data.get("sha256", ""))
                for c in claims]

    def _write(self, payload: Payload, owner: str) -> str:
        data = payload.SerializeToString(deterministic=True)
        digest = hashlib.sha256(data).hexdigest()
        self._put(digest, data, owner)
        return digest

    def _read(self, digest: str) -> Payload:
        data = self._get(digest)
        if data is None:
            raise missing(str(self), digest)
        if hashlib.sha256(data).hexdigest() != digest:
            raise missing(str(self), digest, "is corrupt")
        return Payload.FromString(data)

    @abc.abstractmethod
    def _put(self, digest: str, data: bytes, owner: str) -> None: ...

    @abc.abstractmethod
    def _get(self, digest: str) -> bytes | None:
        """The bytes stored under ``digest``; None when there are none."""


class LocalDirDriver(_ByDigest):
    """Stores each payload as ``<root>/<sha256[:2]>/<sha256>``."""

    def __init__(self, root: str | Path, name: str = "tower-local") -> None:
        super().__init__(name)
        self.root = Path(root)

    def __str__(self) -> str:
        return str(self.root)

    def _put(self, digest: str, data: bytes, owner: str) -> None:
        path = self.root / digest[:2] / digest
        if not path.exists():  # same content, same file
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(data)
            tmp.replace(path)  # atomic: a reader never sees half a payload

    def _get(self, digest: str) -> bytes | None:
        try:
            return (self.root / digest[:2] / digest).read_bytes()
        except OSError:
            return None


class PostgresDriver(_ByDigest):
    """Stores each payload as one row keyed by its SHA-256 and its owner."""

    def __init__(self, url: str, name: str = "tower-postgres") -> None:
        super().__init__(name)
        self.db = Sql(url, _SCHEMA, lock_id=7246132, create=False)  # connects on first use

    def __str__(self) -> str:
        return str(self.db)

    def _rows(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """``sql``'s rows, asked again once on a new connection after the server dropped
        the last one (it restarted); a server that does not answer is
        PayloadStoreUnavailable."""
        try:
            try:
                return self.db.rows(sql, args)
            except self.db.errors:
                last = self.db._db  # noqa: SLF001
                if last is None or not (last.closed or last.broken):
                    raise
            return self.db.rows(sql, args)
        except self.db.errors as exc:
            raise PayloadStoreUnavailable(
                f"payload store {self} is unreachable: {why_unreachable(exc)}") from None

    def _put(self, digest: str, data: bytes, owner: str) -> None:
        self._rows("INSERT INTO tower_payloads (sha256, data, owner) VALUES (?, ?, ?) "
                   "ON CONFLICT DO NOTHING RETURNING 1", (digest, data, owner))

    def _get(self, digest: str) -> bytes | None:
        rows = self._rows("SELECT data FROM tower_payloads WHERE sha256 = ? LIMIT 1", (digest,))
        return bytes(rows[0][0]) if rows else None

    def owners(self, prefix: str, settled: float = 3600) -> list[str]:
        """Owners under ``prefix`` of payloads stored over ``settled`` seconds ago (a client
        stores a run's input just before the run exists)."""
        rows = self._rows(
            "SELECT DISTINCT owner FROM tower_payloads WHERE starts_with(owner, ?) AND "
            "stored < now() - make_interval(secs => ?)", (prefix, settled))
        return [row[0] for row in rows]

    def forget(self, owner: str) -> None:
        with self.db.transaction() as execute:
            execute("DELETE FROM tower_payloads WHERE owner = ?", (owner,))


class Elsewhere(StorageDriver):
    """A reference to a payload store of the other kind than this process's: it cannot be
    read here (a setting differs between hosts), said in the words of ``missing``."""

    def __init__(self, name: str, ours: str) -> None:
        self._name, self.ours = name, ours

    def name(self) -> str:
        return self._name

    def __str__(self) -> str:
        return f"{self._name} (not read here: this process's store is {self.ours})"

    async def store(self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
                    ) -> list[StorageDriverClaim]:
        raise RuntimeError(f"{self._name} is not this process's payload store")

    async def retrieve(self, context: StorageDriverRetrieveContext,
                       claims: Sequence[StorageDriverClaim]) -> list[Payload]:
        kind = "PostgreSQL" if self._name == "tower-postgres" else "another host's directory"
        digest = claims[0].claim_data.get("sha256", "?") if claims else "?"
        raise missing(self.ours, digest, f"(kept in {kind}) is not")


def tower_data_converter(
    store_dir: str | Path | None = None, threshold: int | None = None,
    env: Mapping[str, str] | None = None,
) -> DataConverter:
    """pydantic payloads, with those over ``threshold`` bytes stored in ``store_dir`` (a
    directory or a ``postgresql://`` URL; default: the settings' payload store)."""
    env = os.environ if env is None else env
    settings = StoreSettings.from_env(env)
    driver = driver_for(store_dir or settings.payloads)
    limit = threshold if threshold is not None else settings.payload_threshold
    # The other kind of store by name too, so that a reference to it says where it is.
    other = Elsewhere("tower-postgres" if isinstance(driver, LocalDirDriver) else "tower-local",
                      str(driver))
    storage = ExternalStorage(drivers=[driver, other], payload_size_threshold=limit,
                              driver_selector=lambda context, payload: driver)
    # Encrypted at rest (tower/temporal/codec.py): payloads and failure messages alike.
    # Without keys: written in clear, and an encrypted payload gets one clear error.
    codec = codec_from_env(env)
    return TowerDataConverter(
        payload_converter_class=TowerPayloadConverter, external_storage=storage,
        payload_codec=codec or NoKeys(), failure_converter_class=(
            DefaultFailureConverterWithEncodedAttributes if codec else DefaultFailureConverter))

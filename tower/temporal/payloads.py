"""Large payloads go to external storage; the history keeps a small reference.

Uses the SDK's own ``ExternalStorage`` (temporalio >= 1.35, experimental) with a
driver for a local directory (content-addressed files, written atomically and checked on
read) or for PostgreSQL, which every worker host and client shares
(``tower.temporal.payloads_pg``); the SDK's S3 or GCS drivers plug in the same way. The
references in the history stay valid as long as the driver name and the data do.

Every client that starts runs and every worker must use the same converter:
``tower_data_converter()`` reads the payload store from ``StoreSettings.from_env()``
(``TOWER_STORE_URL``, else ``TOWER_PAYLOAD_DIR``) and ``TOWER_PAYLOAD_THRESHOLD``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    DataConverter,
    DefaultFailureConverterWithEncodedAttributes,
    ExternalStorage,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

from tower.activities.stores import SHARED, StoreSettings, is_url
from tower.contract.failures import Code, TowerError
from tower.temporal._unopenable import TowerDataConverter, TowerPayloadConverter
from tower.temporal.codec import NoKeys, codec_from_env

DEFAULT_DIR = Path(".tower") / "payloads"


class PayloadMissing(TowerError):
    """A reference in the history names a payload the store does not have (or a bad copy).

    A worker fails the task that needed it (retried: another host, or a fixed setting, can
    serve it); a client says it in one line (tower/cli/errors.py).
    """

    CODE = Code.PAYLOAD_MISSING


class PayloadStoreUnavailable(TowerError):
    """The payload store did not answer. A worker's task that needed it fails and is asked
    again (its log says so in one line: tower/temporal/_interceptors.py); a client says
    it in one line (tower/cli/errors.py)."""

    CODE = Code.PAYLOAD_STORE_UNAVAILABLE


def missing(store: str, digest: str, how: str = "not found") -> PayloadMissing:
    return PayloadMissing(f"payload {digest} {how} in payload store {store}; a store of one "
                          f"host's own cannot serve another host's runs: {SHARED} "
                          f"(TOWER_PAYLOAD_DIR)")


def driver_for(spec: str | Path) -> StorageDriver:
    """The driver for a payload store: a directory, or a ``postgresql://`` URL."""
    text = str(spec)
    if is_url(text):
        from tower.temporal.payloads_pg import PostgresDriver

        return PostgresDriver(text)
    return LocalDirDriver(text)


class LocalDirDriver(StorageDriver):
    """Stores each payload as ``<root>/<sha256[:2]>/<sha256>``."""

    def __init__(self, root: str | Path, name: str = "tower-local") -> None:
        self.root = Path(root)
        self._name = name

    def name(self) -> str:
        return self._name

    def __str__(self) -> str:
        return str(self.root)

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        return [StorageDriverClaim({"sha256": await asyncio.to_thread(self._write, p)})
                for p in payloads]

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        return [await asyncio.to_thread(self._read, c.claim_data) for c in claims]

    def _path(self, digest: str) -> Path:
        return self.root / digest[:2] / digest

    def _write(self, payload: Payload) -> str:
        data = payload.SerializeToString(deterministic=True)
        digest = hashlib.sha256(data).hexdigest()
        path = self._path(digest)
        if not path.exists():  # same content, same file: a retried store is free
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(data)
            tmp.replace(path)  # atomic: a reader never sees half a payload
        return digest

    def _read(self, claim: Mapping[str, str]) -> Payload:
        digest = claim.get("sha256", "")
        try:
            data = self._path(digest).read_bytes()
        except OSError as exc:
            raise missing(str(self.root), digest) from exc
        if hashlib.sha256(data).hexdigest() != digest:
            raise missing(str(self.root), digest, "is corrupt")
        return Payload.FromString(data)


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
    # Tower's pydantic converter (tower.temporal.converter); an input from outside that a
    # worker cannot open is refused, not a stalled run (tower/temporal/_unopenable.py).
    converter = TowerDataConverter(payload_converter_class=TowerPayloadConverter,
                                   external_storage=storage)
    codec = codec_from_env(env)
    if codec is None:  # writes in clear; an encrypted payload gets one clear error
        return dataclasses.replace(converter, payload_codec=NoKeys())
    # Encrypted at rest (tower/temporal/codec.py): payloads and failure messages alike.
    return dataclasses.replace(converter, payload_codec=codec,
                               failure_converter_class=DefaultFailureConverterWithEncodedAttributes)

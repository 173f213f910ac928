"""Large payloads in PostgreSQL: the SDK's external storage with a driver of Tower's own,
so every worker host and client reads what any other wrote (``TOWER_STORE_URL``).

Content-addressed like the local driver (a retried store is free, a read is checked
against its digest); a row per payload and run it was stored for (``namespace/workflow
id``, when the SDK says), so retention removes one run's copy and never another's
(tower/activities/cleanup.py). psycopg 3 is the ``postgres`` extra.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Sequence
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

from tower.activities.stores import redact, why_unreachable
from tower.temporal.payloads import PayloadStoreUnavailable, missing

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tower_payloads (
    sha256 TEXT NOT NULL, owner TEXT NOT NULL, data BYTEA NOT NULL,
    stored TIMESTAMPTZ NOT NULL DEFAULT now(), PRIMARY KEY (sha256, owner));
CREATE INDEX IF NOT EXISTS tower_payloads_owner ON tower_payloads (owner);
"""


class PostgresDriver(StorageDriver):
    """Stores each payload as one row keyed by its SHA-256."""

    def __init__(self, url: str, name: str = "tower-postgres") -> None:
        self.url, self._name = url, name
        self._lock = threading.Lock()
        self._db: Any = None
        self._ready = False

    def name(self) -> str:
        return self._name

    def __str__(self) -> str:
        return redact(self.url)

    def _conn(self) -> Any:
        try:
            import psycopg
        except ImportError:
            raise RuntimeError("the payload store names PostgreSQL but psycopg is not "
                               "installed: pip install 'tower[postgres]'") from None
        if self._db is None or self._db.closed or self._db.broken:
            self._db = psycopg.connect(self.url, autocommit=True, connect_timeout=10)
        if not self._ready:
            with self._db.transaction():
                self._db.execute("SELECT pg_advisory_xact_lock(7246132)")
                self._db.execute(_SCHEMA)
            self._ready = True
        return self._db

    def _execute(self, sql: str, args: tuple[Any, ...]) -> Any:
        """``sql`` on the connection (made again after the server went away); a server
        that does not answer is PayloadStoreUnavailable, naming the store."""
        import psycopg

        try:
            with self._lock:
                return self._run(sql, args)
        except psycopg.OperationalError as exc:
            raise PayloadStoreUnavailable(
                f"payload store {self} is unreachable: {why_unreachable(exc)}") from None

    def _run(self, sql: str, args: tuple[Any, ...]) -> Any:
        import psycopg

        try:
            return self._conn().execute(sql, args).fetchall()
        except psycopg.OperationalError:
            if self._db is None or not (self._db.closed or self._db.broken):
                raise
        # A connection the server dropped (it restarted) is made again, once.
        return self._conn().execute(sql, args).fetchall()

    async def store(self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
                    ) -> list[StorageDriverClaim]:
        target = context.target  # the run it is stored for: its namespace/workflow id
        owner = f"{target.namespace}/{target.id}" if target is not None and target.id \
            else ""
        return [StorageDriverClaim({"sha256": await asyncio.to_thread(self._write, p, owner)})
                for p in payloads]

    async def retrieve(self, context: StorageDriverRetrieveContext,
                       claims: Sequence[StorageDriverClaim]) -> list[Payload]:
        return [await asyncio.to_thread(self._read, c.claim_data.get("sha256", ""))
                for c in claims]

    def _write(self, payload: Payload, owner: str) -> str:
        data = payload.SerializeToString(deterministic=True)
        digest = hashlib.sha256(data).hexdigest()
        self._execute("INSERT INTO tower_payloads (sha256, data, owner) VALUES (%s, %s, %s) "
                      "ON CONFLICT DO NOTHING RETURNING 1", (digest, data, owner))
        return digest

    def _read(self, digest: str) -> Payload:
        rows = self._execute("SELECT data FROM tower_payloads WHERE sha256 = %s LIMIT 1",
                             (digest,))
        row = rows[0] if rows else None
        if row is None:
            raise missing(str(self), digest)
        data = bytes(row[0])
        if hashlib.sha256(data).hexdigest() != digest:
            raise missing(str(self), digest, "is corrupt")
        return Payload.FromString(data)

    def owners(self, prefix: str, settled: float = 3600) -> list[str]:
        """Owners under ``prefix`` of payloads stored over ``settled`` seconds ago (a client
        stores a run's input just before the run exists)."""
        rows = self._execute(
            "SELECT DISTINCT owner FROM tower_payloads WHERE starts_with(owner, %s) AND "
            "stored < now() - make_interval(secs => %s)", (prefix, settled))
        return [row[0] for row in rows]

    def forget(self, owner: str) -> None:
        with self._lock:
            self._conn().execute("DELETE FROM tower_payloads WHERE owner = %s", (owner,))

"""The one place that names a deployment's stores: what a run keeps beside its history.

The message store (conversations), the stream store (live streams) and the payload store
(large payloads). ``StoreSettings.from_env()`` reads them alike in workers, the CLI and the
inbox: ``TOWER_STORE_URL`` (one ``postgresql://`` URL for all three), else each one's own
setting, else local files, which are one host's: another host's turn cannot find them.

``Sql`` is the stores' one way to their database: a SQLite file (one host's) or a
PostgreSQL URL (every host's), with ``?`` placeholders on both. One connection per store
and process, under a lock. PostgreSQL's is made again after the server went away, so a store
unreachable for a while fails those calls, then serves again. psycopg 3 is the optional
``postgres`` extra.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from temporalio.exceptions import ApplicationError

from tower.contract.failures import Code, TowerError, failure
from tower.extras import require

if TYPE_CHECKING:
    from temporalio.client import Client

__all__ = ["StoreSettings", "announce", "entry_missing", "probe",
           "redact", "shared_server", "store_unavailable"]

SHARED = "set TOWER_STORE_URL=postgresql://... on every worker so that they share one"
DEFAULT_DATA = Path(".tower")
DEFAULT_THRESHOLD = 128 * 1024  # far below Temporal's 2 MiB limit, above routine inputs
_PG = ("postgresql://", "postgres://")

log = logging.getLogger("tower.stores")
Execute = Callable[..., Any]  # (sql, args=()) -> a cursor


def is_url(spec: str) -> bool:
    return spec.startswith(_PG)


def redact(spec: str) -> str:
    """``spec`` fit for a log line or an error: a URL's password replaced by ``***``."""
    return re.sub(r"^([a-z][a-z0-9+.-]*://[^:/@]*:)[^@/]*@", r"\1***@", spec)


def entry_missing(store: str, what: str, setting: str) -> ApplicationError:
    """An attempt that found no ``what`` in ``store``: retryable, naming the setting."""
    return failure(TowerError(f"{store} has no {what}; a store of one host's own cannot serve "
                              f"another host's runs: {SHARED} ({setting})",
                              code=Code.STORE_ENTRY_MISSING))


def store_unavailable(store: str, exc: BaseException) -> ApplicationError:
    """An attempt that could not reach ``store``: retried. Raise it ``from None``: the
    driver's chained error can pass the server's 4 KB limit on a failure, which then shows
    only "Failure exceeds size limit." instead."""
    return failure(TowerError(f"{store} is unreachable: {why_unreachable(exc)}",
                              code=Code.STORE_UNAVAILABLE))


def why_unreachable(exc: BaseException) -> str:
    """A driver's error in one bounded line: its first (the rest repeats it per address)."""
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else type(exc).__name__


@dataclass(frozen=True)
class StoreSettings:
    """Where messages, streams and large payloads are: paths or ``postgresql://`` URLs."""

    messages: str
    streams: str
    payloads: str
    payload_threshold: int = DEFAULT_THRESHOLD

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *,
                 data_dir: str | Path | None = None) -> StoreSettings:
        """The stores ``env`` names; local files go in ``data_dir`` (default: beside
        ``TOWER_DB`` when it is a file, else ``.tower``). ValueError for a bad setting."""
        env = os.environ if env is None else env
        url = env.get("TOWER_STORE_URL", "").strip()
        if url and not is_url(url):
            raise ValueError(f"TOWER_STORE_URL must be a postgresql:// URL, not {redact(url)!r}")
        # Local files sit beside the tools' database (TOWER_DB), as they always have; a
        # tools' database on PostgreSQL has no folder: they go in .tower.
        tools = env.get("TOWER_DB", "")
        data = Path(data_dir) if data_dir else (
            Path(tools).parent if tools and not is_url(tools) else DEFAULT_DATA)
        threshold = env.get("TOWER_PAYLOAD_THRESHOLD") or str(DEFAULT_THRESHOLD)
        if not threshold.isdigit():
            raise ValueError(f"TOWER_PAYLOAD_THRESHOLD must be a number of bytes, "
                             f"not {threshold!r}")
        for name in ("TOWER_MESSAGES", "TOWER_STREAMS"):
            spec = env.get(name, "")
            if "://" in spec and not is_url(spec):
                raise ValueError(f"{name} must be a path or a postgresql:// URL, "
                                 f"not {redact(spec)!r}")
        return cls(
            messages=env.get("TOWER_MESSAGES") or url or str(data / "messages.sqlite"),
            streams=env.get("TOWER_STREAMS") or url or str(data / "streams.sqlite"),
            payloads=env.get("TOWER_PAYLOAD_DIR") or url or str(DEFAULT_DATA / "payloads"),
            payload_threshold=int(threshold))

    def specs(self) -> dict[str, str]:
        return {"message store": self.messages, "stream store": self.streams,
                "payload store": self.payloads}

    def described(self) -> dict[str, str]:
        """Each store's name and where it is (passwords hidden), for start-up lines."""
        return {name: f"PostgreSQL {redact(spec)}" if is_url(spec)
                else f"local {'directory' if name == 'payload store' else 'file'} {spec}"
                for name, spec in self.specs().items()}

    def local(self) -> list[str]:
        """The stores that are one host's own files."""
        return [name for name, spec in self.specs().items() if not is_url(spec)]


def probe(spec: str) -> tuple[bool, str]:
    """Whether the store at ``spec`` can serve (a local one not made yet can), in a few words."""
    if not is_url(spec):
        return True, "present" if Path(spec).exists() else "not made yet (a worker makes it)"
    try:
        import psycopg
    except ImportError:
        return False, "psycopg is not installed: pip install 'tower[postgres]'"
    try:
        with psycopg.connect(spec, connect_timeout=5) as db:
            db.execute("SELECT 1")
    except psycopg.Error as exc:
        return False, f"unreachable: {why_unreachable(exc)}"
    return True, "answers"


async def shared_server(client: Client) -> bool | None:
    """Whether ``client``'s Temporal server is not the embedded dev server, which runs on
    SQLite (None: the server did not say)."""
    from temporalio.api.workflowservice.v1 import GetClusterInfoRequest

    try:
        info = await client.workflow_service.get_cluster_info(GetClusterInfoRequest())
    except Exception:  # noqa: BLE001  (an old or restricted server)
        return None
    return bool(info.persistence_store) and info.persistence_store != "sqlite"


def local_warning(local: list[str]) -> str:
    return (f"{' and '.join(local)} {'is' if len(local) == 1 else 'are'} local to this host, "
            "but the Temporal server is shared: a run another host served will not find what "
            f"this host stored. {SHARED} (docs/production.md)")


async def announce(settings: StoreSettings, client: Client | None = None,
                   logger: logging.Logger = log) -> None:
    """Say which store each is; on a server that is not the embedded dev server, warn of
    every store that is a local file."""
    for name, where in settings.described().items():
        logger.info("%s: %s", name, where)
    local = settings.local()
    if client is not None and local and await shared_server(client):
        logger.warning("%s", local_warning(local))


class Sql:
    """The database at ``spec``. ``schema`` (``CREATE ... IF NOT EXISTS``) is run when it is
    opened, under PostgreSQL advisory lock ``lock_id`` (two workers starting at once: one
    creates, the other waits). ``create=False`` (a client) never makes a local file: until
    a worker makes it, there is nothing to read."""

    def __init__(self, spec: str, schema: str, *, lock_id: int, create: bool = True,
                 durable: bool = True) -> None:
        self.spec, self.pg = spec, is_url(spec)
        self.schema, self.lock_id, self.create, self.durable = schema, lock_id, create, durable
        self.errors: tuple[type[Exception], ...] = (sqlite3.OperationalError,)
        if self.pg:
            require("postgres", f"the store at {redact(spec)}")
            import psycopg

            self._psycopg = psycopg
            self.errors += (psycopg.OperationalError,)
        self._lock = threading.Lock()
        self._db: Any = None
        if create:
            with self._lock:
                self._open()

    def __str__(self) -> str:
        return redact(self.spec)

    def _open(self) -> Any:
        if self.pg:
            if self._db is None or self._db.closed or self._db.broken:
                server = self._psycopg.connect(self.spec, autocommit=True, connect_timeout=10)
                with server.transaction():
                    server.execute("SELECT pg_advisory_xact_lock(%s)", (self.lock_id,))
                    server.execute(self.schema)
                self._db = server
        elif self._db is None and (self.create or Path(self.spec).exists()):
            Path(self.spec).parent.mkdir(parents=True, exist_ok=True)
            local = sqlite3.connect(self.spec, timeout=30, check_same_thread=False,
                                    isolation_level=None)
            local.execute("PRAGMA busy_timeout=30000")
            wal(local)
            if not self.durable:
                local.execute("PRAGMA synchronous=NORMAL")  # WAL: durable at checkpoints
            local.executescript(self.schema)
            self._db = local
        return self._db

    def _execute(self, db: Any) -> Execute:
        if self.pg:
            return lambda sql, args=(): db.execute(sql.replace("?", "%s"), list(args))
        return lambda sql, args=(): db.execute(sql, args)

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """What ``sql`` selects ([] from a local file not made yet)."""
        with self._lock:
            db = self._open()
            return [] if db is None else list(self._execute(db)(sql, args).fetchall())

    @contextmanager
    def transaction(self) -> Iterator[Execute]:
        """One transaction (on SQLite, holding the write lock from its start); yields the
        ``execute(sql, args)`` that runs in it."""
        with self._lock:
            db = self._open()
            assert db is not None, "a store opened with create=False only reads"
            if self.pg:
                with db.transaction():
                    yield self._execute(db)
                return
            db.execute("BEGIN IMMEDIATE")
            try:
                yield self._execute(db)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


def wal(db: sqlite3.Connection, tries: int = 200) -> None:
    """Put the file in SQLite's write-ahead log mode, for a file several processes open
    (workers starting together): readers never block the writer. The switch needs the file
    to itself and does not wait (no busy timeout), so a process opening it at the same moment
    makes it fail: tried again, for up to ~10 s."""
    for attempt in range(tries):
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY or attempt == tries - 1:
                raise
            time.sleep(0.05)

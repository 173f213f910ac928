"""The one place that names a deployment's stores: what a run keeps beside its history.

The message store (conversations), the stream store (live streams) and the payload store
(large payloads). ``StoreSettings.from_env()`` reads them alike in workers, the CLI and the
inbox: ``TOWER_STORE_URL`` (one ``postgresql://`` URL for all three), else each one's own
setting, else local files, which are one host's: another host's turn cannot find them.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from temporalio.exceptions import ApplicationError

from tower.contract.failures import Code, TowerError, failure

if TYPE_CHECKING:
    from temporalio.client import Client

__all__ = ["StoreSettings", "announce", "entry_missing", "probe",
           "redact", "shared_server", "store_unavailable"]

SHARED = "set TOWER_STORE_URL=postgresql://... on every worker so that they share one"
DEFAULT_DATA = Path(".tower")
DEFAULT_THRESHOLD = 128 * 1024  # far below Temporal's 2 MiB limit, above routine inputs
_PG = ("postgresql://", "postgres://")

log = logging.getLogger("tower.stores")


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
        def where(name: str, spec: str) -> str:
            kind = "directory" if name == "payload store" else "file"
            return f"PostgreSQL {redact(spec)}" if is_url(spec) else f"local {kind} {spec}"

        return {name: where(name, spec) for name, spec in self.specs().items()}

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

"""Tower's own activities, which ``TowerPlugin`` registers on every worker beside a
project's tools (``tower_activities``: add a new one of Tower's there, and only there).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tower.activities.cleanup import StoreCleanup
from tower.activities.messages import MessageStore
from tower.activities.model import ModelActivities, ModelSettings
from tower.activities.scripted import Scripts
from tower.activities.stores import StoreSettings
from tower.activities.streams import StreamStore, open_streams
from tower.activities.trust import WORKER_KEY_FILE, Trust

__all__ = ["WorkerSettings", "tower_activities"]

log = logging.getLogger("tower.worker")


@dataclass(frozen=True)
class WorkerSettings:
    """Where a worker's own activities find their models, trust and stores; None: the
    environment's (OPENAI_*, TOWER_MODELS, TOWER_TRUST_DIR, ``StoreSettings.from_env``)."""

    models: ModelSettings | None = None
    trust_dir: str | Path | None = None
    messages: str | Path | None = None
    streams: StreamStore | str | Path | None = None
    data_dir: str | Path | None = None  # where local stores go unless the environment says


def tower_activities(settings: WorkerSettings, scripts: Scripts, payloads: Any = None,
                     ) -> tuple[list[Callable[..., Any]], StreamStore]:
    """Tower's activities for a worker (model gateway, trust loader, notifier, attester,
    retention of the stores and of ``payloads``), and the stream store its runs publish to."""
    stores = StoreSettings.from_env(data_dir=settings.data_dir)
    streams = settings.streams
    if streams is None or isinstance(streams, str | Path):
        streams = open_streams(streams or stores.streams)
    messages = MessageStore(settings.messages or stores.messages)
    model = ModelActivities(settings.models or ModelSettings.from_env(), messages,
                            scripts=scripts, streams=streams)
    # Retention: what closed runs left in the stores goes (tower/temporal/worker.py).
    cleanup = StoreCleanup({"message store": messages, "stream store": streams,
                            "payload store": payloads})
    trust = Trust(settings.trust_dir)
    return [model.call_model, trust.load_trust, trust.notify_gate, trust.tower_attest,
            cleanup.tower_cleanup_stores], streams


def attestation_missing(settings: WorkerSettings, namespace: str) -> str | None:
    """Why this worker cannot attest its gated runs' requests (None: it can)."""
    trust = Trust(settings.trust_dir)
    try:
        key = trust.key_for(namespace)
    except (OSError, ValueError) as exc:
        return f"its attestation key cannot be read: {exc}"
    if key is None:
        where = trust.key or f"{trust.root}/{namespace}/{WORKER_KEY_FILE}"
        return (f"it has no attestation key ({where}; TOWER_WORKER_KEY): approvers will not "
                "see its requests in `tower pending` or the inbox. Make one with "
                "`tower keys worker` (docs/production.md)")
    return None

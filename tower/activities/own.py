"""Tower's own activities: what every Tower worker runs beside a project's tools.

``TowerPlugin`` registers them on every worker it configures, from ``WorkerSettings``
(the environment by default), so that a project's worker is a plain
``Worker(client, task_queue=..., workflows=AGENTS, activities=[...its tools...])``. The
list is ``tower_activities``: add a new one of Tower's there, and only there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tower.activities.attest import Attester
from tower.activities.cleanup import StoreCleanup, retention_from_env
from tower.activities.messages import open_messages
from tower.activities.model import ModelActivities, ModelSettings
from tower.activities.notify import Notifier
from tower.activities.scripted import Scripts
from tower.activities.stores import StoreSettings
from tower.activities.streams import StreamStore, open_streams
from tower.activities.trust import TrustLoader

__all__ = ["WorkerSettings", "tower_activities"]

log = logging.getLogger("tower.worker")


@dataclass(frozen=True)
class WorkerSettings:
    """Where a worker's own activities find their models, trust and stores. Every field
    None is the environment's: OPENAI_API_KEY / OPENAI_BASE_URL / TOWER_MODELS (none: the
    offline scripted model), TOWER_TRUST_DIR, and the stores ``StoreSettings.from_env``
    names (TOWER_STORE_URL; TOWER_MESSAGES, TOWER_STREAMS; else beside TOWER_DB, else in
    ``.tower/``)."""

    models: ModelSettings | None = None
    trust_dir: str | Path | None = None
    messages: str | Path | None = None
    streams: StreamStore | str | Path | None = None
    data_dir: str | Path | None = None  # where local stores go unless the environment says


def tower_activities(settings: WorkerSettings, scripts: Scripts, payloads: Any = None,
                     ) -> tuple[list[Callable[..., Any]], StreamStore]:
    """Tower's activities for a worker, with the stream store its runs publish their steps
    to (``publish_steps``): the model gateway (answering from ``scripts`` when offline),
    the trust loader, the gate notifier, the attester, and the stores' retention cleanup
    (of ``payloads`` too: the payload store's driver); conversations go to the message
    store."""
    stores = StoreSettings.from_env(data_dir=settings.data_dir)
    streams = settings.streams
    if streams is None or isinstance(streams, str | Path):
        streams = open_streams(streams or stores.streams)
    messages = open_messages(str(settings.messages or stores.messages))
    model = ModelActivities(settings.models or ModelSettings.from_env(), messages,
                            scripts=scripts, streams=streams)
    # Retention: what closed runs left in the stores goes (tower/temporal/cleanup.py).
    cleanup = StoreCleanup({"message store": messages, "stream store": streams,
                            "payload store": payloads},
                           retention_from_env())
    trust = settings.trust_dir
    return [model.call_model, TrustLoader(trust).load_trust, Notifier(trust).notify_gate,
            Attester(trust).attest, cleanup.cleanup], streams


def attestation_missing(settings: WorkerSettings, namespace: str) -> str | None:
    """Why this worker cannot attest its gated runs' requests (None: it can)."""
    attester = Attester(settings.trust_dir)
    try:
        key = attester.key_for(namespace)
    except (OSError, ValueError) as exc:
        return f"its attestation key cannot be read: {exc}"
    if key is None:
        where = attester.key or f"{attester.root}/{namespace}/worker.jwk"
        return (f"it has no attestation key ({where}; TOWER_WORKER_KEY): approvers will not "
                "see its requests in `tower pending` or the inbox. Make one with "
                "`tower keys worker` (docs/production.md)")
    return None

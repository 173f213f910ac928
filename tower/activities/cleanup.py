"""Retention: what closed runs left in the stores is removed after a period.

Each store records which run (``namespace/workflow id``) owns an entry. An owner's entries
go once no execution of its workflow id is open and the last closed over the period ago (or
its history is gone); an entry another run also owns stays. Idempotent: it runs from a
Schedule (tower/temporal/worker.py). The period: ``TOWER_STORE_RETENTION`` (``30d``,
``12h``, ``90m`` or seconds), else the namespace's retention.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from temporalio import activity
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

CLEANUP_ACTIVITY = "tower_cleanup_stores"
_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1, "": 1}


class Owned(Protocol):
    def owners(self, prefix: str) -> list[str]: ...

    def forget(self, owner: str) -> None: ...


def retention_from_env(env: Mapping[str, str] | None = None) -> timedelta | None:
    """``TOWER_STORE_RETENTION``, or None (the namespace's retention)."""
    text = (os.environ if env is None else env).get("TOWER_STORE_RETENTION", "").strip()
    if not text:
        return None
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([dhms]?)", text)
    if match is None:
        raise ValueError(f"TOWER_STORE_RETENTION must be a period like 30d, 12h or 90m, "
                         f"not {text!r}")
    return timedelta(seconds=float(match[1]) * _UNITS[match[2]])


class StoreCleanup:
    """The cleanup activity over this worker's stores (those that record owners)."""

    def __init__(self, stores: Mapping[str, Any]) -> None:
        self.stores: dict[str, Owned] = {name: s for name, s in stores.items()
                                         if hasattr(s, "owners") and hasattr(s, "forget")}
        self.retention = retention_from_env()

    @activity.defn  # named by the function: CLEANUP_ACTIVITY
    async def tower_cleanup_stores(self, retention_seconds: float | None = None) -> dict[str, int]:
        """Forget, in each store, the owners of the client's namespace closed over the
        period ago; how many runs' entries each store lost."""
        client = activity.client()
        if retention_seconds is not None:
            period = timedelta(seconds=retention_seconds)
        elif self.retention is not None:
            period = self.retention
        else:
            described = await client.workflow_service.describe_namespace(
                DescribeNamespaceRequest(namespace=client.namespace))
            period = described.config.workflow_execution_retention_ttl.ToTimedelta()
        cutoff, prefix = datetime.now(UTC) - period, f"{client.namespace}/"
        removed = dict.fromkeys(self.stores, 0)
        verdicts: dict[str, bool] = {}
        for name, store in self.stores.items():
            for owner in await asyncio.to_thread(store.owners, prefix):
                if owner not in verdicts:
                    verdicts[owner] = await _closed_before(client, owner[len(prefix):], cutoff)
                    activity.heartbeat(owner)
                if verdicts[owner]:
                    await asyncio.to_thread(store.forget, owner)
                    removed[name] += 1
        return removed


async def _closed_before(client: Client, workflow_id: str, cutoff: datetime) -> bool:
    try:
        described = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:  # its history is gone: nothing refers
            return True
        raise
    if described.status in (None, WorkflowExecutionStatus.RUNNING):
        return False
    return described.close_time is not None and described.close_time < cutoff

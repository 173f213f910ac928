"""Runs waiting for a decision, for the inbox: the client's listing (``tower.client.pending``,
from Temporal's visibility store only, so it works while no worker answers), newest request
first, each with the request it published."""

from __future__ import annotations

from collections.abc import Iterable

from temporalio.client import Client

from tower.client import Waiting, pending, pending_of
from tower.client._pending import pending_memo, role_query

__all__ = ["Waiting", "pending_memo", "role_query", "waiting_run", "waiting_runs"]

waiting_run = pending_of  # one run's status and pending request, from describe()


async def waiting_runs(client: Client, roles: Iterable[str], limit: int = 200) -> list[Waiting]:
    """Runs awaiting a decision that one of ``roles`` may take, newest request first; a run
    whose request this inbox cannot read is left out."""
    found = [w for w in await pending(client, roles=roles, limit=limit) if w.view is not None]
    return sorted(found, key=lambda w: w.view.requested_at if w.view else 0, reverse=True)

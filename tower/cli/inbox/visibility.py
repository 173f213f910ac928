"""Runs waiting for a decision, for the inbox: the client's listing (``tower.client.pending``,
from Temporal's visibility store only, so it works while no worker answers), newest request
first, each with the request it published. A run whose request cannot be read is left out
of the list, and its own page says why (``UnreadableRequest``)."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import ValidationError
from temporalio.client import Client, WorkflowExecutionStatus

from tower.client import pending
from tower.client._pending import Deployment, Waiting, pending_memo, role_query, view_of
from tower.contract import search
from tower.contract.failures import Code, TowerError
from tower.contract.pending import PendingView

__all__ = ["UnreadableRequest", "Waiting", "pending_memo", "role_query", "waiting_run",
           "waiting_runs"]


class UnreadableRequest(TowerError, ValueError):  # a ValueError: a memo's bad value
    """A run's memo holds a pending request that cannot be read (forged, or from a version
    this one cannot read); the message says why."""

    CODE = Code.BAD_INPUT


async def waiting_runs(client: Client, roles: Iterable[str], limit: int = 200,
                       deployment: Deployment | None = None) -> list[Waiting]:
    """Runs awaiting a decision that one of ``roles`` may take, newest request first; a run
    whose request this inbox cannot read (or, with ``deployment``, that its worker did not
    attest) is left out."""
    found = [w for w in await pending(client, roles=roles, limit=limit, deployment=deployment)
             if w.view is not None]
    return sorted(found, key=lambda w: w.view.requested_at if w.view else 0, reverse=True)


async def waiting_run(client: Client, run: str, deployment: Deployment | None = None
                      ) -> tuple[WorkflowExecutionStatus | None, PendingView | None]:
    """One run's status and pending request (None when nothing waits), from describe().
    Raises UnreadableRequest when the run has a pending-request memo it cannot read, or
    (with ``deployment``) one no worker of the deployment attested."""
    described = await client.get_workflow_handle(run).describe()
    view = None
    if described.status == WorkflowExecutionStatus.RUNNING:
        agent = described.typed_search_attributes.get(search.AGENT_NAME) or "?"
        try:
            raw = (await described.memo()).get(search.PENDING_MEMO)
        except Exception:  # whatever the codec or converter raises on bytes a starter chose
            raise UnreadableRequest("its memo cannot be decoded") from None
        view = view_of(raw, agent)
        if raw is not None and view is None:
            raise UnreadableRequest(f"its pending request is malformed ({_problem(raw)})")
        why = deployment.refusal(described, view) if deployment and view else None
        if why is not None:
            raise UnreadableRequest(f"it is not a genuine request of this deployment: {why}")
    return described.status, view


def _problem(raw: object) -> str:
    try:
        PendingView.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        return f"{'.'.join(str(p) for p in first['loc']) or 'memo'}: {first['msg']}"
    return "unreadable"

"""Decisions from a client: sign one with the approver's own key and send it to the run as
its ``decide`` update (``Gatekeeper.decide``), which answers with the outcome the run
reported — or refuses it, and then nothing changed.

The signing and the sending are ``tower.cli.approvals``' (make_decision, submit_decision):
this is a thin layer over them that finds the run's pending request first.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowUpdateFailedError

from tower.client._runs import describe, query
from tower.client.errors import ClientError, DecisionRefused, RunNotFound
from tower.contract.decisions import GateRecord, Verdict, proposal_digest
from tower.core.gates import Outcome
from tower.temporal.gating import Gatekeeper

# How long a decision waits for another worker to take over a run whose worker stopped
# (killed: the server keeps sending the run to it for ~10 s).
TAKEOVER_SECONDS = 40.0


async def decide(
    client: Client, run: str, verdict: Verdict, *, approver: str, role: str | None = None,
    gate: str | None = None, note: str = "", edits: dict[str, Any] | None = None,
    decision_id: str | None = None, use_signal: bool = False, unsigned: bool = False,
    config: Path | None = None, say: Callable[[str], None] | None = None,
    takeover: float = TAKEOVER_SECONDS,
) -> Outcome | None:
    """Sign ``approver``'s decision on RUN's pending request with their own key (in
    ``config``, default ``tower.cli.keys.config_dir()``) and send it; the Outcome the run
    reported, or None when sent as a signal. DecisionRefused when the run refuses it
    (nothing changed). ``say`` hears what is done (and any wait for a worker)."""
    from tower.cli.approvals import make_decision

    handle = client.get_workflow_handle(run)
    approvals = await _approvals(client, run, say=say, takeover=takeover)
    pending = approvals.get("pending")
    if pending is None:
        raise ClientError(f"run {run!r} has no pending approval ({last_request(approvals)})")
    if approvals.get("trust") != "roster":
        raise ClientError(f"run {run!r} was started before signed decisions (it verifies a "
                          "per-run HMAC key): let it finish or time out, or terminate it")
    request = GateRecord.model_validate(pending)
    if gate is not None and gate != request.gate:
        raise ClientError(f"run {run!r} waits at gate {request.gate!r}, not {gate!r}")
    role = role or request.role
    decision_id = decision_id or f"d-{uuid.uuid4().hex[:12]}"
    # Signed for exactly what is shown here: this run id, this step, this proposal.
    payload, how = make_decision(
        tenant=client.namespace, run=run, pending=request, verdict=verdict, approver=approver,
        role=role, note=note, edits=edits, decision_id=decision_id, unsigned=unsigned,
        config=config)
    if say:
        say(f"decision {decision_id}: {verdict.value} gate {request.gate} of {run} by "
            f"{approver} ({role}), {how}")
        shown = ", ".join(f"{k}={v}" for k, v in request.proposal.items()) or "-"
        say(f"  for the request at step {request.step} of run id {request.run_id}: {shown} "
            f"({proposal_digest(request)[:19]}…)")
    if use_signal:
        await handle.signal("decision", payload)  # the gate's dynamic signal: no method
        if say:
            say("sent as a signal; refused signals are listed in the run's audit trail "
                "(query `approvals`)")
        return None
    try:
        return await send_decision(client, run, payload)
    except DecisionRefused as exc:
        if not str(exc).startswith("unknown key id"):
            raise
    # Perhaps the key was added to the roster after the run last read it: ask it to
    # re-read now, wait for that, and send once more.
    await handle.signal("refresh_trust")
    async with asyncio.timeout(30):
        while (await query(client, handle, Gatekeeper.query_approvals)).get(
                "refreshed_at") == approvals.get("refreshed_at"):
            await asyncio.sleep(0.2)
    return await send_decision(client, run, payload)


async def send_decision(client: Client, run: str, message: dict[str, Any]) -> Outcome:
    """Send a decision already made (``{"token": JWS}``) and wait for the run's outcome;
    DecisionRefused with the run's reason when it refuses it."""
    from tower.cli.approvals import submit_decision

    try:
        return await submit_decision(client.get_workflow_handle(run), message)
    except WorkflowUpdateFailedError as exc:
        cause = exc.cause
        raise DecisionRefused(getattr(cause, "message", None) or str(cause)) from None


async def _approvals(client: Client, run: str, *, say: Callable[[str], None] | None,
                     takeover: float) -> dict[str, Any]:
    """The run's ``approvals`` query (its pending request, its trust mode): a running run's
    only, asked with a takeover wait (see ``query``)."""
    handle = client.get_workflow_handle(run)
    try:
        info = await describe(handle)
    except RunNotFound:
        raise RunNotFound(f"run {run!r} not found in namespace {client.namespace!r}") from None
    if info.status != WorkflowExecutionStatus.RUNNING:
        status = info.status.name if info.status else "unknown"
        last = ""
        if info.status == WorkflowExecutionStatus.COMPLETED:
            state = await client.get_workflow_handle(run, result_type=dict).result()
            last = "; " + last_request({"records": state.get("approvals", [])})
        raise ClientError(f"run {run!r} is closed ({status}): nothing to decide{last}")
    result: dict[str, Any] = await query(client, handle, Gatekeeper.query_approvals,
                                         takeover=takeover, say=say)
    return result


def last_request(approvals: dict[str, Any]) -> str:
    """What became of the run's last approval request, in a few words."""
    records = approvals.get("records") or []
    if not records:
        return "it never asked for one"
    r = records[-1]
    decided = r.get("decision") or {}
    who = f" by {decided.get('approver')}" if decided else ""
    when = f" (expired at {r['expires_at']})" if r["status"] == "expired" else ""
    return f"its last request, gate {r['gate']}, was {r['status']}{who}{when}"

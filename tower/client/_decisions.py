"""Decisions from a client: signed with the approver's own key (``tower.client.keys``)
and sent as the run's ``decide`` update, which answers with the outcome or refuses it (then
nothing changed). ``unsigned=True`` sends the claims in the clear: only a deployment whose
policy allows unsigned decisions accepts that.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from joserfc import jws
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from tower.client._runs import describe, query
from tower.client.errors import ClientError, DecisionRefused, RunNotFound
from tower.client.keys import check_name, sign_decision
from tower.contract import names
from tower.contract.decisions import GateRecord, Verdict, proposal_digest
from tower.contract.failures import Code, rebuilt
from tower.core.gates import Outcome
from tower.core.signing import decision_claims


class NotConfirmed(ClientError):
    """The approver did not confirm the request shown: nothing was signed."""

    CODE = Code.NOT_CONFIRMED


# How long a decision waits for another worker to take over a run whose worker stopped
# (killed: the server keeps sending the run to it for ~10 s).
TAKEOVER_SECONDS = 40.0
# How long a decision waits for a running run to open a request: a run forked back to its
# gate, or just started, replays and attests before its request shows.
OPENING_SECONDS = 15.0


async def prepare(
    client: Client, run: str, verdict: Verdict, *, approver: str, role: str | None = None,
    gate: str | None = None, note: str = "", edits: dict[str, Any] | None = None,
    decision_id: str | None = None, unsigned: bool = False, config: Path | None = None,
    say: Callable[[str], None] | None = None, takeover: float = TAKEOVER_SECONDS,
    confirm: Callable[[GateRecord, str], bool] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``approver``'s signed decision on RUN's pending request, not sent: the ``decide``
    update's input (``{"token": JWS}``; any Temporal client can send it) and the run's
    ``approvals`` as read. ``confirm`` sees the request and its digest before anything is
    signed; False signs nothing."""
    check_name(approver)  # before anything is asked of the server
    approvals = await _approvals(client, run, say=say, takeover=takeover)
    deadline = time.monotonic() + OPENING_SECONDS
    if approvals.get("pending") is None and say:
        say(f"run {run} has no request open yet: waiting up to {OPENING_SECONDS:.0f} s for one")
    while approvals.get("pending") is None and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        approvals = await _approvals(client, run, say=say, takeover=takeover)
    pending = approvals.get("pending")
    if pending is None:
        raise ClientError(f"run {run!r} has no pending approval ({last_request(approvals)})")
    request = GateRecord.model_validate(pending)
    if gate is not None and gate != request.gate:
        raise ClientError(f"run {run!r} waits at gate {request.gate!r}, not {gate!r}")
    # Signed for exactly what is shown here: this run id, this step, this proposal.
    digest = proposal_digest(request)
    if confirm is not None and not confirm(request, digest):
        raise NotConfirmed(f"nothing was signed or sent for run {run!r}")
    role = role or request.role
    decision_id = decision_id or f"d-{uuid.uuid4().hex[:12]}"
    payload, how = make_decision(
        tenant=client.namespace, run=run, pending=request, verdict=verdict, approver=approver,
        role=role, note=note, edits=edits, decision_id=decision_id, unsigned=unsigned,
        config=config, digest=digest)
    if say:
        say(f"decision {decision_id}: {verdict.value} gate {request.gate} of {run} by "
            f"{approver} ({role}), {how}")
        say(f"  for the request at step {request.step} of run id {request.run_id}, proposal "
            f"{digest}")
    return payload, approvals


async def decide(
    client: Client, run: str, verdict: Verdict, *, approver: str, role: str | None = None,
    gate: str | None = None, note: str = "", edits: dict[str, Any] | None = None,
    decision_id: str | None = None, use_signal: bool = False, unsigned: bool = False,
    config: Path | None = None, say: Callable[[str], None] | None = None,
    takeover: float = TAKEOVER_SECONDS,
    confirm: Callable[[GateRecord, str], bool] | None = None,
) -> Outcome | None:
    """Sign ``approver``'s decision on RUN's pending request and send it (``prepare``, then
    the ``decide`` update): the Outcome, or None when sent as a signal; DecisionRefused when
    the run refuses it. ``say`` hears what is done, and any wait for a worker."""
    payload, approvals = await prepare(
        client, run, verdict, approver=approver, role=role, gate=gate, note=note,
        edits=edits, decision_id=decision_id, unsigned=unsigned, config=config, say=say,
        takeover=takeover, confirm=confirm)
    if use_signal:
        await client.get_workflow_handle(run).signal(names.DECISION.name, payload)
        if say:
            say("sent as a signal; refused signals are listed in the run's audit trail "
                "(query `approvals`)")
        return None
    # A key or role enrolled since the run last read its roster: the run reads it again
    # by itself before it refuses (tower/temporal/_gate.py).
    return await send_decision(client, run, payload)


async def send_decision(client: Client, run: str, message: dict[str, Any]) -> Outcome:
    """Send a decision already made and wait for the outcome; DecisionRefused with the
    run's reason when refused."""
    try:
        return await submit_decision(client.get_workflow_handle(run), message)
    except WorkflowUpdateFailedError as exc:
        refused = rebuilt(exc)
        if isinstance(refused, DecisionRefused):
            raise refused from None
        cause = exc.cause
        raise DecisionRefused(getattr(cause, "message", None) or str(cause)) from None


async def _approvals(client: Client, run: str, *, say: Callable[[str], None] | None,
                     takeover: float) -> dict[str, Any]:
    """A running run's ``approvals`` query, asked with a takeover wait (see ``query``)."""
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
    return await query(client, handle, names.APPROVALS.name, dict, takeover=takeover, say=say)


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


def make_decision(
    *, tenant: str, run: str, pending: GateRecord, verdict: Verdict, approver: str,
    role: str, note: str = "", edits: dict[str, Any] | None = None,
    decision_id: str | None = None, unsigned: bool = False, config: Path | None = None,
    digest: str | None = None, key: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], str]:
    """The wire message for a decision on ``pending`` (the request the run showed), and how
    it was signed (with ``key``, else ``approver``'s in ``config``): it names the request's
    run id, step and proposal digest, so the run takes it only while that very proposal is
    pending."""
    check_name(approver)
    fields: dict[str, Any] = dict(tenant=tenant, run=run, run_id=pending.run_id,
                                  gate=pending.gate, request=pending.step,
                                  proposal=digest or proposal_digest(pending),
                                  verdict=verdict.value,
                                  role=role, edits=edits or {}, note=note,
                                  jti=decision_id or f"d-{uuid.uuid4().hex[:12]}")
    if unsigned:
        claims = decision_claims(sub=approver, now=time.time(), **fields)
        return ({"unsigned": claims.model_dump(mode="json")},
                "UNSIGNED (accepted only where the deployment allows unsigned decisions)")
    token, claims = sign_decision(approver, config=config, key=key, **fields)
    kid = jws.extract_compact(token.encode()).headers()["kid"]
    return {"token": token}, f"signed with {approver}'s key {kid}"


# The server aborts an update when it fails, itself, the workflow task that carried it (an
# event arrived while that task closed the run: UnhandledCommand). The decision was not
# taken and the run goes on waiting, so it is sent again; had it been taken, the same
# signed decision would be a duplicate that changes nothing.
RESENDS = 3


async def submit_decision(handle: WorkflowHandle[Any, Any], message: dict[str, Any]) -> Outcome:
    """The outcome of ``message`` (the ``decide`` update), sent again while the server
    aborts it with its task; a refusal raises WorkflowUpdateFailedError."""
    resent = 0
    while True:
        try:
            return await handle.execute_update(names.DECIDE.name, message,
                                              result_type=Outcome)
        except RPCError as exc:
            if resent == RESENDS or not aborted_with_its_task(exc):
                raise
            resent += 1


def aborted_with_its_task(exc: RPCError) -> bool:
    return (exc.status == RPCStatusCode.FAILED_PRECONDITION
            and "unexpected workflow task failure" in exc.message)

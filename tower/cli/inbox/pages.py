"""The inbox's pages: the list, the decision page, a decision and what was decided, the
live-update probe. A run whose request this deployment could not have made (an unknown
agent, node or gate, a memo that cannot be read) is a 404 that says why."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.templating import Jinja2Templates
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from tower.cli.approvals import unattested
from tower.cli.inbox import money
from tower.cli.inbox.forms import (
    DecisionForm,
    FormError,
    is_money,
    read_form,
    shown_request,
    signed_decision,
)
from tower.cli.inbox.guard import InboxStore
from tower.cli.inbox.identity import Approver
from tower.cli.inbox.visibility import (
    NotOurRequest,
    Scope,
    UnreadableRequest,
    check_request,
    not_found,
    picture,
    run_story,
    visible_run,
    waiting_run,
    waiting_runs,
)
from tower.cli.ui import run_link
from tower.client import DecisionRefused
from tower.client._decisions import send_decision
from tower.contract.decisions import GateStatus
from tower.contract.failures import Code
from tower.contract.pending import PendingView
from tower.core.gates import Outcome

if TYPE_CHECKING:
    from tower.cli.inbox.app import InboxConfig

DECIDE_SECONDS = 30.0
WATCH_ONLY = ("This inbox only watches: it was started without a signing key (--watch-only), "
              "so it decides nothing.")
CACHE_SECONDS = 1.0  # live updates: many open pages, one visibility call a second


class Inbox:
    def __init__(self, config: InboxConfig, client: Client, templates: Jinja2Templates,
                 store: InboxStore) -> None:
        self.config, self.client, self.templates, self.store = config, client, templates, store
        self.scope = Scope(config.watchers)  # who may see which run: every route asks it
        self._cache: dict[Any, tuple[float, Any]] = {}

    @property
    def signs(self) -> bool:
        """Whether this inbox may decide: it has a signing key (else it only watches)."""
        return self.config.issuer is not None

    def render(self, request: Request, name: str, approver: Approver | None,
               status: int = 200, **context: Any) -> Response:
        from tower.cli.inbox.app import csrf_token
        return self.templates.TemplateResponse(request, name, {
            "approver": approver, "csrf": csrf_token(request), "tenant": self.config.tenant,
            "proxy": self.config.proxy is not None, "now": datetime.now(UTC), **context},
            status_code=status)

    def refused(self, request: Request, approver: Approver, status: int, message: str,
                **context: Any) -> Response:
        return self.render(request, "message.html", approver, status=status, kind="refused",
                           message=message, **context)

    async def waiting(self, request: Request, approver: Approver) -> Response:
        runs = await self._waiting(approver)
        deployment = self.config.deployment
        # An empty list must not look like nothing waits when nothing can be listed at all.
        notice = unattested(deployment, self.client.namespace) if deployment else None
        return self.render(request, "list.html", approver, runs=runs, notice=notice,
                           fingerprint=list_fingerprint(runs))

    async def _seen(self, request: Request, approver: Approver, run: str, fresh: bool = False,
                    **context: Any) -> Response | tuple[WorkflowExecutionStatus,
                                                        PendingView | None]:
        """The run's status and request if ``approver`` may see it, else the 404 page."""
        try:
            seen = await visible_run(self, approver, run, fresh=fresh)
        except NotOurRequest as exc:
            return self.refused(request, approver, 404, f"Run {run!r} is not a request this "
                                f"inbox can show: {exc}. Nothing here can be decided.")
        return seen or self.refused(request, approver, 404, not_found(run, self.config.tenant),
                                    **context)

    async def run_page(self, request: Request, approver: Approver) -> Response:
        run = request.path_params["run"]
        # (a page opened before its run starts goes live when it does)
        seen = await self._seen(request, approver, run, live_run=run)
        if isinstance(seen, Response):
            return seen
        status, view = seen
        story = await run_story(self.client, run, status)
        shown = await shown_request(self.client, run, view) if view else None
        return self.render(
            request, "run.html", approver, run=run, run_status=status.name, view=view,
            story=story, picture=picture(view.agent, view.node) if view else "",
            amount=money.headline(view.proposal) if view else None,
            proposal_digest=shown[1] if shown else "",
            may_decide=view is not None and view.role in approver.roles and self.signs,
            signs=self.signs, watch_only=WATCH_ONLY,
            web_ui=run_link(self.config.web_ui, self.config.tenant, run),
            fingerprint=run_fingerprint(status, view))

    async def decide(self, request: Request, approver: Approver) -> Response:
        run = request.path_params["run"]
        seen = await self._seen(request, approver, run, fresh=True)
        if isinstance(seen, Response):
            return seen
        status, view = seen
        back = {"run": run}
        if not self.signs:
            return self.refused(request, approver, 403, WATCH_ONLY + " Nothing was sent.",
                                **back)
        if view is None:
            story = await run_story(self.client, run, status)
            what = story.last_request or f"the run is {status.name if status else 'unknown'}"
            return self.refused(request, approver, 409, "Refused: this run is no longer "
                                f"waiting for a decision ({what}). Nothing was sent.", **back)
        if view.role not in approver.roles:
            return self.refused(
                request, approver, 403, f"Refused: gate {view.gate} needs role {view.role}; "
                f"{approver.name} holds {', '.join(approver.roles) or 'no role'}. "
                "Nothing was sent.", **back)
        try:
            posted = {k: str(v) for k, v in (await request.form()).items()}
            form = read_form(posted, view)
            # Signed only for the very request the page showed: same run id, same proposal.
            shown = await shown_request(self.client, run, view)
            if shown is None or posted.get("proposal") != shown[1]:
                raise FormError("the request changed since this page was shown (or no "
                                "worker answered): reload the page and decide again")
            assert self.config.issuer is not None  # (self.signs)
            payload = signed_decision(issuer=self.config.issuer, tenant=self.config.tenant,
                                      run=run, request=shown[0], digest=shown[1],
                                      approver=approver.name, form=form)
        except FormError as exc:
            return self.refused(request, approver, 400, f"Refused: {exc}. Nothing was sent.",
                                **back)
        try:
            outcome = await asyncio.wait_for(send_decision(self.client, run, payload),
                                             DECIDE_SECONDS)
        except DecisionRefused as exc:
            return self.refused(request, approver, 409, refusal_text(exc), **back)
        except TimeoutError:
            return self.refused(request, approver, 504, "No worker confirmed the decision in "
                                f"{DECIDE_SECONDS:.0f} s; reload the page to see whether the "
                                "run took it.", **back)
        self._cache.clear()
        # Post/redirect/get: what was decided is a page of its own, safe to reload.
        receipt = self.store.keep_receipt(self.config.tenant, approver.name, receipt_of(
            run, view, form, approver, outcome))
        return RedirectResponse(f"/decided/{receipt}", 303)

    async def decided(self, request: Request, approver: Approver) -> Response:
        """What ``approver`` decided, restated: verdict, amounts, by whom, when."""
        receipt = self.store.receipt(self.config.tenant, approver.name,
                                     request.path_params["receipt"])
        if receipt is None:
            return self.refused(request, approver, 404, "No such decision of yours.")
        return self.render(request, "decided.html", approver, receipt=receipt,
                           run=receipt["run"])

    async def changes(self, request: Request, approver: Approver) -> Response:
        """What the live pages poll: a fingerprint that changes when their content does."""
        run = request.query_params.get("run")
        if run is None:
            runs = await self._waiting(approver)
            return JSONResponse({"fingerprint": list_fingerprint(runs)})
        try:
            seen = await visible_run(self, approver, run)
        except NotOurRequest as exc:
            return JSONResponse({"fingerprint": "NOT-OURS", "message": str(exc)}, 404)
        if seen is None:
            return JSONResponse({"fingerprint": "NONE", "message": not_found(
                run, self.config.tenant)}, 404)
        status, view = seen
        message = ""
        if view is None and status is not None:
            story = await run_story(self.client, run, status)
            message = "This run is no longer waiting for a decision" + (
                f": {story.last_request}" if story.last_request else f" ({status.name})")
            if story.last_status in (GateStatus.APPROVED, GateStatus.REJECTED):
                message += ". It was already decided."
        return JSONResponse({"fingerprint": run_fingerprint(status, view), "message": message})

    async def _waiting(self, approver: Approver) -> list[Any]:
        roles = tuple(sorted(self.scope.list_roles(approver)))
        runs = await self._cached(("list", roles),
                                  lambda: waiting_runs(self.client, roles,
                                                     deployment=self.config.deployment))
        return [w for w in runs if ours(w.view)]

    async def _run(self, run: str, fresh: bool = False) -> tuple[
            WorkflowExecutionStatus | None, PendingView | None]:
        """The run's status and request; NotOurRequest when no agent of this deployment
        could have made the request it shows."""
        async def read() -> tuple[WorkflowExecutionStatus | None, PendingView | None]:
            try:
                status, view = await waiting_run(self.client, run, self.config.deployment)
            except RPCError as exc:
                if exc.status == RPCStatusCode.NOT_FOUND:
                    return None, None
                raise
            except UnreadableRequest as exc:
                raise NotOurRequest(str(exc)) from None
            if view is not None:
                check_request(view)
            return status, view
        return await read() if fresh else await self._cached(("run", run), read)

    async def _cached(self, key: Any, load: Any) -> Any:
        hit = self._cache.get(key)
        if hit is not None and time.monotonic() - hit[0] < CACHE_SECONDS:
            return hit[1]
        value = await load()
        self._cache[key] = (time.monotonic(), value)
        if len(self._cache) > 1000:
            self._cache.clear()
        return value


def ours(view: PendingView) -> bool:
    """Could an agent of this deployment have made this request? (Else it is not listed.)"""
    try:
        check_request(view)
    except NotOurRequest:
        return False
    return True


def list_fingerprint(runs: list[Any]) -> str:
    return "|".join(f"{w.run}@{w.view.step}" for w in runs)


def run_fingerprint(status: WorkflowExecutionStatus | None, view: PendingView | None) -> str:
    return f"{status.name if status else 'NONE'}:{view.gate if view else ''}:" \
           f"{view.step if view else ''}"


def refusal_text(refused: DecisionRefused) -> str:
    """What the page says of a refusal: chosen by its code, never by its words."""
    reason = refused.reason
    if refused.code == Code.ALREADY_DECIDED:
        return f"Already decided by another approver: {reason}. Your decision was not applied."
    if refused.code == Code.EXPIRED:
        return f"Refused: the request expired ({reason}). Nothing changed."
    return f"Refused by the run: {reason}. Nothing changed."


def outcome_text(outcome: Outcome) -> str:
    text = f"Gate {outcome.gate}: {outcome.result.value}"
    if outcome.result.value == "stale":
        text += (f". The re-check found the world changed ({outcome.reason}); the run went "
                 f"back to {outcome.node} to plan again")
    elif outcome.reason:
        text += f" — {outcome.reason}"
    return text + f". The run is now {outcome.status} at {outcome.node}."


def receipt_of(run: str, view: PendingView, form: DecisionForm, approver: Approver,
               outcome: Outcome) -> dict[str, Any]:
    """What the decision page restates: what was sent, what the run did with it, when."""
    amounts = []
    for f in view.fields:
        if is_money(f) and form.verdict.value == "approve":
            new = form.edits.get(f.name, f.value)
            amounts.append({"label": money.label(f.name), "amount": money.text(new),
                            "proposed": money.text(f.value) if new != f.value else ""})
    edits = {k: v for k, v in form.edits.items()
             if not any(f.name == k and is_money(f) for f in view.fields)}
    headline = money.headline(view.proposal)
    return {"run": run, "agent": view.agent, "gate": view.gate, "node": view.node,
            "verdict": form.verdict.value, "result": outcome.result.value,
            "approver": approver.name, "role": view.role, "note": form.note,
            "amounts": amounts, "edits": edits, "limit": headline[1] if headline else "",
            "at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
            "outcome": outcome_text(outcome)}

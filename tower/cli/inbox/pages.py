"""The inbox's pages: the list, the decision page, a decision and what was decided; and
their server-sent events (docs/streaming.md, "In a browser"). A run whose request this
deployment could not have made (an unknown agent, node or gate, a memo that cannot be read)
is a 404 that says why; a run the user may not see is the same 404 as a run nobody started.

``/api/changes`` sends what a live page shows again whenever it changes (checked every
second, from a one-second cache of visibility; ``?fingerprint=`` is what the page shows
already); ``/api/runs/RUN/stream`` is a run's live stream, each event's offset its SSE id.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse
from starlette.templating import Jinja2Templates
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from tower.activities.streams import open_streams
from tower.cli.approvals import unattested
from tower.cli.inbox.forms import (
    DecisionForm,
    FormError,
    headline,
    is_money,
    label,
    money,
    money_field,
    read_form,
    shown_request,
    signed_decision,
)
from tower.cli.inbox.identity import Approver, InboxStore
from tower.cli.inbox.visibility import (
    Scope,
    not_found,
    not_ours,
    picture,
    run_story,
    waiting_runs,
)
from tower.cli.live import MODEL_KINDS
from tower.cli.ui import run_link
from tower.client import DecisionRefused
from tower.client._decisions import send_decision
from tower.client._pending import NotGenuine, pending_of
from tower.contract.decisions import GateStatus
from tower.contract.failures import Code
from tower.contract.pending import PendingView
from tower.contract.stream import Reply, stream_name
from tower.core.gates import Outcome

if TYPE_CHECKING:
    from tower.cli.inbox.app import InboxConfig

DECIDE_SECONDS = 30.0
WATCH_ONLY = ("This inbox only watches: it was started without a signing key (--watch-only), "
              "so it decides nothing.")
CACHE_SECONDS = 1.0  # live updates: many open pages, one visibility call a second
KEEP_ALIVE_SECONDS = 15.0  # a comment line, so proxies keep the connection open
MAX_SECONDS = 30 * 60  # then the browser reconnects, with the session checked again
WAIT_SECONDS = 60.0  # the longest a stream waits for its run to appear
WAIT_POLL_SECONDS = 0.5
RETRY_MS = 2000  # EventSource's reconnection delay
SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
Seen = tuple[WorkflowExecutionStatus, PendingView | None]


class Inbox:
    def __init__(self, config: InboxConfig, client: Client, templates: Jinja2Templates,
                 store: InboxStore) -> None:
        self.config, self.client, self.templates, self.store = config, client, templates, store
        self.scope = Scope(config.watchers)  # who may see which run: every route asks it
        self._cache: dict[Any, tuple[float, Any]] = {}
        self.streams = open_streams(create=False)  # the runs' live streams

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

    async def visible(self, approver: Approver, run: str, fresh: bool = False,
                      wait: float = 0.0) -> Seen | str:
        """``run``'s status and open request when ``approver`` may see it, else the 404's
        text. ``wait``: seconds to ask again while it is not there (a page opened just before
        its run starts gets the run)."""
        deadline = time.monotonic() + wait
        while True:
            try:
                status, view = await self._run(run, fresh=fresh)
            except NotGenuine as exc:
                return (f"Run {run!r} is not a request this inbox can show: {exc}. Nothing here "
                        "can be decided.")
            past = functools.partial(self._past_roles, run, status)
            # A run that does not exist (no status) is seen by nobody.
            if status is not None and await self.scope.may_see(approver, view, past):
                return status, view
            if time.monotonic() >= deadline:  # not there, or not theirs: the same answer
                return not_found(run, self.config.tenant)
            await asyncio.sleep(WAIT_POLL_SECONDS)

    async def run_page(self, request: Request, approver: Approver) -> Response:
        run = request.path_params["run"]
        seen = await self.visible(approver, run)
        if isinstance(seen, str):  # a run not there yet goes live when it starts; forged, never
            return self.refused(request, approver, 404, seen, live_run=run if seen == not_found(
                run, self.config.tenant) else None)
        status, view = seen
        story = await run_story(self.client, run, status)
        shown = await shown_request(self.client, run, view) if view else None
        return self.render(
            request, "run.html", approver, run=run, run_status=status.name, view=view,
            story=story, picture=picture(view.agent, view.node) if view else "",
            amount=headline(view.proposal) if view else None,
            proposal_digest=shown[1] if shown else "",
            may_decide=view is not None and view.role in approver.roles and self.signs,
            signs=self.signs, watch_only=WATCH_ONLY,
            web_ui=run_link(self.config.web_ui, self.config.tenant, run),
            fingerprint=run_fingerprint(status, view))

    async def decide(self, request: Request, approver: Approver) -> Response:
        run = request.path_params["run"]
        seen = await self.visible(approver, run, fresh=True)
        if isinstance(seen, str):
            return self.refused(request, approver, 404, seen)
        status, view = seen
        back = {"run": run}
        if not self.signs:
            return self.refused(request, approver, 403, WATCH_ONLY + " Nothing was sent.",
                                **back)
        if view is None:
            story = await run_story(self.client, run, status)
            what = story.last_request or f"the run is {status.name}"
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
        """The live pages' server-sent events: the list's rows, or what became of a run."""
        run, given = request.query_params.get("run"), request.query_params.get("fingerprint")
        if run is not None and isinstance(seen := await self.visible(approver, run), str):
            return Response(seen, 404)
        rows = self.templates.get_template("runs_table.html")

        async def look() -> tuple[str, dict[str, Any]]:
            if run is None:
                runs = await self._waiting(approver)
                return list_fingerprint(runs), {"html": rows.render(
                    runs=runs, approver=approver, now=datetime.now(UTC))}
            seen = await self.visible(approver, run)
            if isinstance(seen, str):
                return "GONE", {"message": seen}
            status, view = seen
            return run_fingerprint(status, view), {
                "message": await self.news(run, status) if view is None else ""}

        async def events() -> AsyncIterator[str]:
            shown, started, quiet = given, time.monotonic(), time.monotonic()
            while time.monotonic() - started < MAX_SECONDS:
                fingerprint, said = await look()
                if fingerprint != shown:
                    yield sse("change", {"fingerprint": fingerprint, **said})
                    shown, quiet = fingerprint, time.monotonic()
                elif time.monotonic() - quiet > KEEP_ALIVE_SECONDS:
                    yield ": still here\n\n"
                    quiet = time.monotonic()
                await asyncio.sleep(CACHE_SECONDS)

        return StreamingResponse(events(), media_type="text/event-stream", headers=SSE_HEADERS)

    async def news(self, run: str, status: WorkflowExecutionStatus) -> str:
        """What the decision page says once its run waits no more."""
        story = await run_story(self.client, run, status)
        message = "This run is no longer waiting for a decision" + (
            f": {story.last_request}" if story.last_request else f" ({status.name})")
        if story.last_status in (GateStatus.APPROVED, GateStatus.REJECTED):
            message += ". It was already decided."
        return message

    async def run_stream(self, request: Request, approver: Approver) -> Response:
        from tower.client import stream
        from tower.client._stream import folded

        run = request.path_params["run"]
        after = _offset(request.headers.get("last-event-id")
                        or request.query_params.get("after"))
        if after is None:
            return Response("Last-Event-ID and ?after= take an offset (a whole number)", 400)
        wait = _wait(request.query_params.get("wait"))
        if wait is None:
            return Response(f"?wait= takes seconds, 0 to {WAIT_SECONDS:g}", 400)
        seen = await self.visible(approver, run, fresh=True, wait=wait)
        if isinstance(seen, str):
            return Response(seen, 404)
        name = stream_name(self.client.namespace, run)

        async def events() -> AsyncIterator[str]:
            started = time.monotonic()
            yield f"retry: {RETRY_MS}\n\n"
            # A resumed reader's fold starts from what it had: the events up to `after`.
            reply = (await asyncio.to_thread(folded, self.streams, name, after))[0] \
                if after else Reply()
            async for event in stream(self.client, run, after=after, store=self.streams):
                data = event.as_json()
                if event.kind in MODEL_KINDS:  # the whole text shown so far, and its state
                    reply.take(event)
                    data["reply"] = reply.as_json()
                yield sse(event.kind, data, id=event.offset)
                if time.monotonic() - started > MAX_SECONDS:
                    return  # the browser reconnects from its last id, signed in or not
            yield sse("end", {"run": run})

        return StreamingResponse(events(), media_type="text/event-stream", headers=SSE_HEADERS)

    async def _waiting(self, approver: Approver) -> list[Any]:
        roles = tuple(sorted(self.scope.list_roles(approver)))
        return await self._cached(("list", roles), lambda: waiting_runs(
            self.client, roles, deployment=self.config.deployment))

    async def _run(self, run: str, fresh: bool = False) -> tuple[
            WorkflowExecutionStatus | None, PendingView | None]:
        """The run's status and request; NotGenuine, saying why, when the request it shows
        is not one this deployment's agents made and its worker attested."""
        async def read() -> tuple[WorkflowExecutionStatus | None, PendingView | None]:
            try:
                status, view = await pending_of(self.client, run, self.config.deployment)
            except RPCError as exc:
                if exc.status == RPCStatusCode.NOT_FOUND:
                    return None, None
                raise
            why = not_ours(view) if view is not None else None
            if why is not None:
                raise NotGenuine(why)
            return status, view
        return await read() if fresh else await self._cached(("run", run), read)

    async def _past_roles(self, run: str, status: WorkflowExecutionStatus | None) -> Any:
        story = functools.partial(run_story, self.client, run, status)
        return (await self._cached(("story", run), story)).gate_roles

    async def _cached(self, key: Any, load: Any) -> Any:
        hit = self._cache.get(key)
        if hit is not None and time.monotonic() - hit[0] < CACHE_SECONDS:
            return hit[1]
        value = await load()
        self._cache[key] = (time.monotonic(), value)
        if len(self._cache) > 1000:
            self._cache.clear()
        return value


def sse(event: str, data: dict[str, Any], id: int | None = None) -> str:
    head = f"id: {id}\n" if id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data)}\n\n"


def _wait(raw: str | None) -> float | None:
    if raw is None or raw == "":
        return WAIT_SECONDS
    try:
        seconds = float(raw)
    except ValueError:
        return None
    return seconds if 0 <= seconds <= WAIT_SECONDS else None


def _offset(raw: str | None) -> int | None:
    if raw is None or raw == "":
        return 0
    return int(raw) if raw.isdigit() and len(raw) < 19 else None


def list_fingerprint(runs: list[Any]) -> str:
    return "|".join(f"{w.run}@{w.view.step}" for w in runs)


def run_fingerprint(status: WorkflowExecutionStatus, view: PendingView | None) -> str:
    return f"{status.name}:{view.gate if view else ''}:{view.step if view else ''}"


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
            amounts.append({"label": label(f.name), "amount": money(new),
                            "proposed": money(f.value) if new != f.value else ""})
    edits = {k: v for k, v in form.edits.items() if not money_field(k, view)}
    limit = headline(view.proposal)
    return {"run": run, "agent": view.agent, "gate": view.gate, "node": view.node,
            "verdict": form.verdict.value, "result": outcome.result.value,
            "approver": approver.name, "role": view.role, "note": form.note,
            "amounts": amounts, "edits": edits, "limit": limit[1] if limit else "",
            "at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
            "outcome": outcome_text(outcome)}

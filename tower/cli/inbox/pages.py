"""The inbox's pages: the list, the decision page, a decision and what was decided; and
their server-sent events (docs/streaming.md). A run whose request this deployment could not
have made (an unknown agent, node or gate, a memo that cannot be read) is a 404 that says
why; a run the user may not see is the same 404 as a run nobody started.

- ``GET /api/changes`` (``?run=RUN``): what a live page shows, sent again whenever it
  changes (checked every second, from a one-second cache of visibility): the list's rendered
  rows, or what became of the run. ``?fingerprint=`` is what the page shows already.
- ``GET /api/runs/RUN/stream``: run RUN's live stream (the model's text as it forms, each
  step), one SSE event per stream event, its offset as the event id: a browser's
  EventSource that reconnects sends ``Last-Event-ID`` and resumes there (``?after=N``
  does the same by hand). It ends with an ``end`` event once the run has ended. A run that
  is not there yet is waited for, up to ``?wait=`` seconds (WAIT_SECONDS, at most that),
  then 404; the first line is ``retry:``, so a dropped EventSource comes back soon. Each
  model event carries ``reply``: the fold (``Reply``) after it, the whole text shown and
  its state, for a client that does not fold attempts itself.

Which runs the inbox shows, to whom, and what it reads of them (``Scope``, ``waiting_runs``,
``run_story``). Runs waiting for a decision come from Temporal's visibility store only (the client's
``pending``), so the list works while no worker answers. A run's memo is written by whoever
started it: the agent, node and gate it names are checked against this deployment's agents
before anything is drawn or offered, and a request that cannot be read is left out of the
list (its own page says why).

A signed-in user sees a run only when one of their roles may decide its open gate, or could
have decided a gate it has passed, or when they hold a watcher role (read-only). For
everyone else the run does not exist: the same 404 as for a run id nobody started
(docs/inbox.md, "Who sees what").
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse
from starlette.templating import Jinja2Templates
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from tower.activities.streams import open_streams
from tower.cli.agents import agents
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
from tower.cli.live import MODEL_KINDS
from tower.cli.ui import run_link
from tower.client import DecisionRefused, pending
from tower.client._decisions import send_decision
from tower.client._pending import Deployment, NotGenuine, Waiting, pending_of
from tower.contract import names
from tower.contract.decisions import GateStatus
from tower.contract.failures import Code
from tower.contract.pending import PendingView
from tower.contract.stream import Reply, stream_name
from tower.core.gates import Outcome
from tower.core.pictures import machine_svg

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
QUERY_SECONDS = 3.0  # a missing worker makes the page say so, never hang
MAX_MESSAGES = 30
MAX_CHARS = 2000
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


async def waiting_runs(client: Client, roles: Iterable[str], limit: int = 200,
                       deployment: Deployment | None = None) -> list[Waiting]:
    """Runs awaiting a decision that one of ``roles`` may take, newest request first; a run
    whose request this inbox cannot read, or could not have been made by an agent of this
    deployment (or, with ``deployment``, that its worker did not attest), is left out."""
    found = [w for w in await pending(client, roles=roles, limit=limit, deployment=deployment)
             if w.view is not None and not_ours(w.view) is None]
    return sorted(found, key=lambda w: w.view.requested_at if w.view else 0, reverse=True)


def not_ours(view: PendingView) -> str | None:
    """Why no agent of this deployment could have made ``view`` (it names an agent, node or
    gate the deployment does not have), else None."""
    agent = agents().get(view.agent)
    if agent is None:
        return f"it names agent {view.agent!r}, which this deployment does not have"
    if view.node not in agent.machine.nodes:
        return f"agent {view.agent!r} has no node {view.node!r}"
    gate = agent.machine.gates.get(view.node)
    if gate is None or gate.name != view.gate:
        return f"agent {view.agent!r} has no gate {view.gate!r} at node {view.node!r}"
    return None


@functools.lru_cache(maxsize=64)
def picture(agent: str, node: str) -> str:
    """The SVG of ``agent`` waiting at ``node`` (both checked by ``not_ours``)."""
    return machine_svg(agents()[agent].machine, node)


@dataclass(frozen=True)
class RunStory:
    """What the decision page shows beside the request."""

    messages: list[dict[str, str]] = field(default_factory=list)
    last_request: str = ""  # what became of the last approval request
    last_status: str = ""  # its status (GateStatus's value): what the pages read
    outcome: str = ""  # how a finished run ended (its last reply)
    answered: bool = True  # False: no worker answered within QUERY_SECONDS
    # The run itself says its deployment accepts UNSIGNED decisions. Never read from the
    # TowerUnsignedDecisions search attribute: whoever starts a run can set that one.
    unsigned: bool = False
    # The roles of the gates the run recorded (open or closed): who may see it.
    gate_roles: frozenset[str] = frozenset()


async def run_story(client: Client, run: str, status: WorkflowExecutionStatus | None) -> RunStory:
    handle = client.get_workflow_handle(run, result_type=dict)
    try:
        if status == WorkflowExecutionStatus.COMPLETED:
            state = await asyncio.wait_for(handle.result(), QUERY_SECONDS)
        elif status in (WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.FAILED):
            # A FAILED run is a failed execution: a worker answers its state query.
            state = await asyncio.wait_for(handle.query(names.STATE.name, result_type=dict),
                                           QUERY_SECONDS)
        else:
            return RunStory()
    except (TimeoutError, RPCError):
        return RunStory(answered=False)
    messages = [{"role": str(m.get("role", "")), "name": str(m.get("name") or ""),
                 "content": _short(str(m.get("content", "")))}
                for m in state.get("messages", []) if isinstance(m, dict)][-MAX_MESSAGES:]
    replies = [m["content"] for m in messages if m["role"] == "assistant"]
    records = [r for r in state.get("approvals") or [] if isinstance(r, dict)]
    last = records[-1] if records else {}
    return RunStory(messages=messages, last_request=last_request(last),
                    last_status=str(last.get("status") or ""),
                    outcome=f"{state.get('status', '')}: {replies[-1] if replies else ''}"
                    .rstrip(": "), unsigned=state.get("unsigned_decisions") is True,
                    gate_roles=frozenset(str(r["role"]) for r in records if r.get("role")))


def last_request(r: dict[str, Any]) -> str:
    if not r:
        return ""
    decided = r.get("decision") or {}
    text = f"gate {r.get('gate')}: {r.get('status')}"
    if decided:
        text += f" by {decided.get('approver')} ({decided.get('role')})"
        if decided.get("note"):
            text += f": {decided['note']}"
    if r.get("reason"):
        text += f" — {r['reason']}"
    return text


def _short(text: str) -> str:
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 1] + "…"


@dataclass(frozen=True)
class Scope:
    """The inbox's visibility rule. ``watchers``: roles that may read every run of the
    tenant and decide none (empty unless the deployment configures one)."""

    watchers: frozenset[str] = frozenset()

    def watches(self, approver: Approver) -> bool:
        return bool(self.watchers & set(approver.roles))

    def list_roles(self, approver: Approver) -> set[str]:
        """The gate roles whose waiting runs the user's list shows: their own roles, or
        every gate role of the deployment's agents for a watcher."""
        roles = set(approver.roles)
        return roles | gate_roles() if self.watches(approver) else roles

    async def may_see(self, approver: Approver, view: PendingView | None,
                      past_roles: Callable[[], Awaitable[Iterable[str]]]) -> bool:
        """``view``: the open request (None if nothing waits); ``past_roles``: the roles of
        the gates the run recorded, asked for (a query) only when nothing else decides."""
        mine = set(approver.roles)
        if self.watches(approver) or (view is not None and view.role in mine):
            return True
        # Only roles some gate of this deployment's agents needs: a state that names a
        # made-up role grants nothing.
        return bool(mine & set(await past_roles()) & gate_roles())


def not_found(run: str, tenant: str) -> str:
    """The one answer for a run that is not there or not the user's to see."""
    return f"No run {run!r} in tenant {tenant!r}."


def gate_roles() -> frozenset[str]:
    """Every role a gate of this deployment's agents needs (``agents()`` is cached)."""
    return frozenset(gate.role for agent in agents().values()
                     for gate in agent.machine.gates.values())

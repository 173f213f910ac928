"""The inbox's web app: sign in, list what you may decide, decide. Starlette + Jinja2.

Security in one place: identity comes from the session (built-in accounts) or from a
trusted proxy's header, never from a form; a session is good only for the tenant that
signed it in, with the roles its account holds now, and only while the server keeps its
id (sign-out revokes it: a copied cookie stops working); failed sign-ins slow down per
(name, client address) only, never for long (429, identity.py); every POST carries the
session's CSRF token; the session cookie is HttpOnly, SameSite=Lax and Secure when served
over TLS; pages carry a strict Content-Security-Policy (scripts and styles from this app
only).

Who sees what (``Scope``; docs/inbox.md, "Who sees what"): a signed-in user sees a run only
when one of their roles may decide its open gate, or could have decided a gate it has
passed, or when they hold a watcher role (read-only). For everyone else the run does not
exist: the same 404 as for a run id nobody started. Runs waiting for a decision come from
Temporal's visibility store only (the client's ``pending``), so the list works while no
worker answers. A run's memo is written by whoever started it: the agent, node and gate it
names are checked against this deployment's agents before anything is drawn or offered; a
request that cannot be read, or that this deployment could not have made, is left out of
the list, and its page is a 404 that says why.

The pages' server-sent events (docs/streaming.md):

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
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
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
    num,
    plain_money,
    read_form,
    shown_request,
    signed_decision,
)
from tower.cli.inbox.identity import Accounts, Approver, InboxStore, ProxyAuth, SignInLimits
from tower.cli.live import MODEL_KINDS
from tower.cli.ui import run_link
from tower.client import DecisionRefused, pending
from tower.client._decisions import send_decision
from tower.client._pending import Deployment, NotGenuine, Waiting, pending_of
from tower.contract import names
from tower.contract.decisions import GateStatus
from tower.contract.failures import Code
from tower.contract.pending import PendingView
from tower.contract.render import WARNING, escape
from tower.contract.stream import Reply, stream_name
from tower.core.gates import Outcome
from tower.core.pictures import machine_svg

HERE = Path(__file__).parent
SESSION_HOURS = 8
STOP_GRACE_SECONDS = 3
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
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


@dataclass(frozen=True)
class InboxConfig:
    """How one inbox serves one tenant (a Temporal namespace)."""

    tenant: str
    session_secret: str
    # The inbox's private JWK; its roster entry says what it vouches for. None: the inbox
    # only watches (shows runs and their streams, decides nothing).
    issuer: Mapping[str, Any] | None
    accounts: Accounts | None = None  # built-in accounts, or
    proxy: ProxyAuth | None = None  # a trusted reverse proxy's user header
    secure_cookies: bool = False  # True when served over TLS
    web_ui: str | None = None  # the Temporal Web UI's base URL, for links to runs
    store: Path | None = None  # sessions and receipts (SQLite); None: in memory
    # Lists only requests its worker attested (tower.client's Deployment); None lists any.
    deployment: Deployment | None = None
    # Roles that may read every run and decide none (docs/inbox.md, "Who sees what").
    watchers: frozenset[str] = frozenset()
    # What the sign-in limits read the time from (tests pass a clock they move).
    sign_in_clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        if (self.accounts is None) == (self.proxy is None):
            raise ValueError("configure exactly one way to sign in: accounts or a proxy header")


def create_app(config: InboxConfig, client: Client) -> Starlette:
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.filters.update(ago=ago, until=until, num=num, money=money,
                                 plain_money=plain_money, rendered=PendingView.rendered,
                                 inert=lambda text: escape(str(text), multiline=True)[0])
    templates.env.globals["hidden_warning"] = WARNING
    templates.env.tests["money"] = is_money
    store, limits = InboxStore(config.store), SignInLimits(clock=config.sign_in_clock)
    inbox = Inbox(config, client, templates, store)

    def signed_in(handler: Callable[[Request, Approver], Awaitable[Response]]) -> Any:
        async def endpoint(request: Request) -> Response:
            approver = who(request, config, store)
            if approver is None:
                if config.proxy is not None:
                    return Response("not signed in: the proxy sent no known user", 401)
                return RedirectResponse("/login?next=" + request.url.path, 303)
            if request.method == "POST" and not csrf_ok(request, await request.form()):
                return inbox.refused(request, approver, 403, "Refused: the form's CSRF token "
                                     "is missing or wrong. Nothing was sent; reload the page.")
            return await handler(request, approver)
        return endpoint

    async def login(request: Request) -> Response:
        if config.accounts is None:
            return RedirectResponse("/", 303)
        if request.method == "GET":
            return inbox.render(request, "login.html", None)
        form = await request.form()
        if not csrf_ok(request, form):
            return inbox.render(request, "login.html", None, status=403,
                                error="The form's CSRF token is missing or wrong: try again.")
        name, address = str(form.get("name", "")), request.client.host if request.client else ""
        wait = limits.wait(name, address)
        if wait > 0:  # the password is not even checked: guessing on gains nothing
            seconds = int(wait) + 1
            response = inbox.render(
                request, "login.html", None, status=429,
                error=f"Too many failed sign-ins for this name from this address: try "
                      f"again in {seconds} s.")
            response.headers["Retry-After"] = str(seconds)
            return response
        approver = config.accounts.sign_in(name, str(form.get("password", "")))
        if approver is None:
            limits.failed(name, address)
            return inbox.render(request, "login.html", None, status=401,
                                error="Unknown name or wrong password.")
        limits.succeeded(name, address)
        store.close_session(request.session.get("sid"))
        request.session.clear()  # a new session on sign-in: no fixation
        request.session.update({
            "tenant": config.tenant, "user": approver.name, "csrf": secrets.token_urlsafe(32),
            "sid": store.open_session(config.tenant, approver.name, SESSION_HOURS * 3600)})
        return RedirectResponse(safe_next(request.query_params.get("next")), 303)

    async def logout(request: Request) -> Response:
        if csrf_ok(request, await request.form()):
            store.close_session(request.session.get("sid"))  # the cookie is dead everywhere
            request.session.clear()
        return RedirectResponse("/login", 303)

    async def security_headers(request: Request, call_next: Any) -> Response:
        response: Response = await call_next(request)
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "same-origin"
        response.headers["Cache-Control"] = "no-store"
        return response

    routes = [
        Route("/", signed_in(inbox.waiting)),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/runs/{run:path}/decide", signed_in(inbox.decide), methods=["POST"]),
        Route("/decided/{receipt}", signed_in(inbox.decided)),
        Route("/runs/{run:path}", signed_in(inbox.run_page)),
        # Server-sent events: what a live page shows, and a run's live stream.
        Route("/api/changes", signed_in(inbox.changes)),
        Route("/api/runs/{run:path}/stream", signed_in(inbox.run_stream)),
        Route("/healthz", lambda r: JSONResponse({"ok": True, "tenant": config.tenant})),
        Mount("/agui", agui_app(config, client, store)),  # AG-UI frontends (docs/agui.md)
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    return Starlette(routes=routes, middleware=[
        Middleware(BaseHTTPMiddleware, dispatch=security_headers),
        Middleware(SessionMiddleware, secret_key=config.session_secret,
                   session_cookie="tower_inbox", max_age=SESSION_HOURS * 3600,
                   same_site="lax", https_only=config.secure_cookies)])


def agui_app(config: InboxConfig, client: Client, store: InboxStore) -> Any:
    """The AG-UI endpoint for the inbox's signed-in users: it signs their answers under
    the inbox's issuer key, on the deployment's agents and task queue."""
    from tower import agui
    from tower.cli import project
    from tower.cli.agents import agents

    def user(request: Request) -> tuple[str, tuple[str, ...]] | None:
        approver = who(request, config, store)
        return (approver.name, tuple(approver.roles)) if approver else None

    queues = os.environ.get("TOWER_TASK_QUEUES") or project.task_queue()
    return agui.app(client, agents=agents, task_queue=queues.split(",")[0].strip(),
                    issuer=config.issuer, who=user, deployment=config.deployment)


def ago(at: datetime, now: datetime) -> str:
    return f"{span(now - at)} ago"


def until(at: datetime, now: datetime) -> str:
    left = at - now
    return f"in {span(left)}" if left.total_seconds() > 0 else "expired"


def span(delta: timedelta) -> str:
    seconds = max(0, int(delta.total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def who(request: Request, config: InboxConfig, store: InboxStore) -> Approver | None:
    if config.proxy is not None:
        peer = request.client.host if request.client else None
        return config.proxy.approver(peer, request.headers)
    # Inboxes of other tenants may share the session secret: a cookie is good only here.
    if request.session.get("tenant") != config.tenant or config.accounts is None:
        return None
    # Only while this server keeps the session: a cookie copied before sign-out is dead.
    user = store.session_user(config.tenant, request.session.get("sid"))
    if user is None or user != request.session.get("user"):
        return None
    account = config.accounts.accounts.get(user)
    # Roles as the accounts file says now, not as they were at sign-in.
    return Approver(user, account.roles) if account else None


def csrf_token(request: Request) -> str:
    token = request.session.get("csrf")
    if not token:
        token = request.session["csrf"] = secrets.token_urlsafe(32)
    return str(token)


def csrf_ok(request: Request, form: Any) -> bool:
    sent, kept = form.get("csrf"), request.session.get("csrf")
    return isinstance(sent, str) and bool(kept) and secrets.compare_digest(sent, str(kept))


def safe_next(target: str | None) -> str:
    # Only a path of this app: an open redirect would hand the session's user elsewhere.
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/"


@contextlib.asynccontextmanager
async def serving(config: InboxConfig, client: Client, *, host: str = "127.0.0.1",
                  port: int = 0, ssl_certfile: str | None = None,
                  ssl_keyfile: str | None = None) -> AsyncIterator[str]:
    """Serve with uvicorn on the caller's event loop (the Temporal client's) until the block
    ends; yields the base URL (port 0: a free port)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    server = uvicorn.Server(uvicorn.Config(
        create_app(config, client), log_level="warning", ssl_certfile=ssl_certfile,
        ssl_keyfile=ssl_keyfile, lifespan="off", proxy_headers=False,
        # A page left open holds its live stream (a run page, the list) for as long as the
        # run lives: stopping waits this long for open responses, then closes them.
        timeout_graceful_shutdown=STOP_GRACE_SECONDS))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()  # raises why it could not start
            await asyncio.sleep(0.05)
        scheme = "https" if ssl_certfile else "http"
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
        yield f"{scheme}://{shown}:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        await task
        sock.close()


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

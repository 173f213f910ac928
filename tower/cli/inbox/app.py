"""The inbox's web app: sign in, list what you may decide, decide. Starlette + Jinja2.

Security in one place: identity comes from the session (built-in accounts) or from a
trusted proxy's header, never from a form; a session is good only for the tenant that
signed it in, with the roles its account holds now, and only while the server keeps its
id (sign-out revokes it: a copied cookie stops working); failed sign-ins slow down per
(name, client address) only, never for long (429, identity.py); a user sees
only the runs their roles decide (visibility.py, Scope); every POST carries the session's
CSRF token; the session cookie is HttpOnly, SameSite=Lax and Secure when served over TLS; pages
carry a strict Content-Security-Policy (scripts and styles from this app only).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from temporalio.client import Client

from tower.cli.inbox import pages
from tower.cli.inbox.forms import is_money, money, num, plain_money
from tower.cli.inbox.identity import Accounts, Approver, InboxStore, ProxyAuth, SignInLimits
from tower.client._pending import Deployment
from tower.contract.pending import PendingView
from tower.contract.render import WARNING, escape

HERE = Path(__file__).parent
SESSION_HOURS = 8
STOP_GRACE_SECONDS = 3
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")


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
    inbox = pages.Inbox(config, client, templates, store)

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

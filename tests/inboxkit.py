"""What the inbox tests share: known accounts, a served inbox, a parked refund and
migration."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
from gatekit import new_id, refund_request, wait_pending
from headless import Browser, sync
from temporalio.client import Client, WorkflowHandle

from tower.activities.trust import trust_dir
from tower.cli.inbox.app import InboxConfig, serving
from tower.cli.inbox.identity import Account, Accounts, hash_password
from tower.cli.trust_files import enrol
from tower.client._pending import pending_of
from tower.client.keys import load_key
from workflows.migration import MigrationAgent, MigrationRequest
from workflows.refund import RefundAgent

PASSWORD = "correct horse"
# carol's role decides no gate; walt's is the watcher role an inbox may configure.
ROLES = {"alice": ("manager",), "bob": ("manager",), "dave": ("dba",), "carol": ("support",),
         "walt": ("auditor",)}
DROP = "ALTER TABLE customers DROP COLUMN fax;\nDROP TABLE legacy_notes;"
_HASH = hash_password(PASSWORD)
ACCOUNTS = Accounts({name: Account(_HASH, roles) for name, roles in ROLES.items()})


def issuer(client: Client, name: str = "inbox",
           vouches_for: tuple[str, ...] = ("manager", "dba")) -> dict[str, Any]:
    """The inbox's issuer key, in the tenant's roster (enrol it before runs start: a run
    reads the roster as it starts)."""
    enrol(trust_dir(), client.namespace, name, vouches_for=list(vouches_for))
    return load_key(name)


def config(client: Client, **kw: Any) -> InboxConfig:
    return InboxConfig(tenant=kw.pop("tenant", client.namespace),
                       session_secret="test-session-secret",
                       accounts=kw.pop("accounts", ACCOUNTS),
                       issuer=kw.pop("issuer", None) or issuer(client), **kw)


@contextlib.asynccontextmanager
async def inbox(client: Client, **kw: Any) -> AsyncIterator[str]:
    async with serving(kw.pop("config", None) or config(client, **kw), client) as url:
        yield url


async def park_refund(client: Client, task_queue: str, **kw: Any) -> WorkflowHandle[Any, Any]:
    """A refund waiting at its gate, visible to the inbox (memo published)."""
    issuer(client)
    run = new_id("refund-inbox")
    handle = await client.start_workflow(RefundAgent.run, refund_request(client, run, **kw),
                                         id=run, task_queue=task_queue)
    await wait_pending(handle)
    async with asyncio.timeout(30):
        while (await pending_of(client, run))[1] is None:
            await asyncio.sleep(0.1)
    return handle


async def park_migration(client: Client, task_queue: str, script: str = DROP
                         ) -> WorkflowHandle[Any, Any]:
    """A destructive migration waiting at its gate for a DBA (the tools database needs
    gatekit's ``make_shop``)."""
    run = new_id("migration-inbox")
    handle = await client.start_workflow(MigrationAgent.run, MigrationRequest(
        database="shop", script=script), id=run, task_queue=task_queue)
    await wait_pending(handle)
    async with asyncio.timeout(30):
        while (await pending_of(client, run))[1] is None:
            await asyncio.sleep(0.1)
    return handle


def decision_form(html: str, **fields: str) -> dict[str, str]:
    """The hidden fields of a decision page's form (CSRF token, gate, request, the digest
    of the proposal shown), and ``fields``: what a browser posts."""
    hidden = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', html))
    assert {"csrf", "gate", "request", "proposal"} <= set(hidden), html[:2000]
    assert hidden["proposal"].startswith("sha256:"), html[:2000]
    return {**hidden, **fields}


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, html[:2000]
    return found.group(1)


async def signed_in(url: str, name: str) -> httpx.AsyncClient:
    """An HTTP session signed in as ``name`` (the caller closes it)."""
    # An idle connection is dropped after 2 s, before the server's keep-alive (5 s) closes
    # it: on a loaded host a request sent as the server closes the socket fails (ReadError).
    session = httpx.AsyncClient(base_url=url, follow_redirects=False, timeout=60,
                                limits=httpx.Limits(keepalive_expiry=2))
    page = await session.get("/login")
    reply = await session.post("/login", data={"name": name, "password": PASSWORD,
                                               "csrf": csrf_of(page.text)})
    assert reply.status_code == 303, reply.text
    return session


async def browser_signed_in(b: Browser, url: str, name: str) -> None:
    """Sign ``name`` in on the inbox's login page in Chromium."""
    await sync(b.open, f"{url}/login")
    await sync(b.wait_for_text, "Password")
    await sync(b.fill, "input[name=name]", name)
    await sync(b.fill, "input[name=password]", PASSWORD)
    await sync(b.click_text, "Sign in")
    await sync(b.wait_for_text, f"{name} · roles")

"""`tower demo --keep-server` leaves a refund and a migration waiting in the approvers'
inbox, serves the inbox and a worker in the background, and prints the inbox's address
and two demo approvers' logins, which work."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
from pathlib import Path

import httpx
from inboxkit import csrf_of
from temporalio.testing import WorkflowEnvironment
from test_cli import TOWER, address_of, cli_env


async def _sign_in(url: str, name: str, password: str) -> httpx.AsyncClient:
    web = httpx.AsyncClient(base_url=url, timeout=60)
    page = await web.get("/login")
    reply = await web.post("/login", data={"name": name, "password": password,
                                           "csrf": csrf_of(page.text)})
    assert reply.status_code == 303, reply.text
    return web


async def test_demo_keep_server_prints_the_inbox_and_logins(
    env: WorkflowEnvironment, tmp_path: Path
) -> None:
    proc = await asyncio.create_subprocess_exec(
        TOWER, "demo", "--keep-server", env=cli_env(address_of(env)), cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 300)
    text = out.decode()
    kill = re.search(r"`kill (\d+) (\d+)`", text)
    try:
        assert proc.returncode == 0, text[-3000:] + err.decode()[-3000:]
        url = re.search(r"Approvers' inbox: (http://127\.0\.0\.1:\d+)", text)
        logins = dict(re.findall(r"sign in as (\w+) / (\S+)  \((\w+)\)", text)[i][:2]
                      for i in range(2))
        assert url and kill and set(logins) == {"alice", "dave"}, text[-2000:]
        for name, expected in (("alice", "demo-inbox-refund-"), ("dave", "demo-inbox-migration-")):
            web = await _sign_in(url.group(1), name, logins[name])
            try:
                listing = (await web.get("/")).text
            finally:
                await web.aclose()
            assert expected in listing, listing
            other = "demo-inbox-migration-" if name == "alice" else "demo-inbox-refund-"
            assert other not in listing
    finally:
        for pid in (kill.groups() if kill else ()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGTERM)

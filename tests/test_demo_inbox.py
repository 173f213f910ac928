"""`tower demo --keep-server` leaves a refund and a migration waiting in the approvers'
inbox, serves the inbox and a worker in the background, keeps the dev server it started,
and prints the inbox's address, two demo approvers' logins (which work) and how to stop
what it left running. Run the way a user runs it (no TOWER_* variable, an empty home and
folder), twice in a row: the second uses the server the first kept, from fresh data."""

from __future__ import annotations

import contextlib
import os
import re
import signal
from pathlib import Path

import httpx
import pytest
from inboxkit import csrf_of
from test_demo import demo, folders, user_env

from tower.cli.devserver import free_port


async def _sign_in(url: str, name: str, password: str) -> httpx.AsyncClient:
    web = httpx.AsyncClient(base_url=url, timeout=60)
    page = await web.get("/login")
    reply = await web.post("/login", data={"name": name, "password": password,
                                           "csrf": csrf_of(page.text)})
    assert reply.status_code == 303, reply.text
    return web


async def _check_inbox(text: str) -> None:
    url = re.search(r"Approvers' inbox: (http://127\.0\.0\.1:\d+)", text)
    logins = dict(login[:2] for login in re.findall(r"sign in as (\w+) / (\S+)  \((\w+)\)", text))
    assert url and set(logins) == {"alice", "dave"}, text[-2000:]
    for name, expected in (("alice", "demo-inbox-refund-"), ("dave", "demo-inbox-migration-")):
        web = await _sign_in(url.group(1), name, logins[name])
        try:
            listing = (await web.get("/")).text
        finally:
            await web.aclose()
        assert expected in listing, listing
        other = "demo-inbox-migration-" if name == "alice" else "demo-inbox-refund-"
        assert other not in listing


@pytest.mark.soak  # two whole demos: a minute and a half of CPU
@pytest.mark.timeout(600)
async def test_demo_keep_server_twice_prints_the_inbox_and_logins(tmp_path: Path) -> None:
    home, here = folders(tmp_path)
    address = f"127.0.0.1:{free_port()}"
    env = user_env(home, address)
    left: list[int] = []  # what the demos leave running, stopped at the end
    try:
        code, text, err = await demo(here, env, "--keep-server")
        left += [int(pid) for pid in re.findall(r"`kill ([\d ]+)`", text) for pid in pid.split()]
        assert code == 0, text[-3000:] + err[-3000:]
        assert "started the embedded dev server" in text
        assert re.search(r"The dev server this demo started keeps running \(pid \d+\)", text)
        assert len(left) == 3, text[-2000:]  # the server, the inbox's worker, the inbox
        await _check_inbox(text)

        code, again, err = await demo(here, env, "--keep-server")
        left += [int(pid) for pid in re.findall(r"`kill ([\d ]+)`", again)
                 for pid in pid.split()]
        assert code == 0, again[-3000:] + err[-3000:]
        assert f"using the Temporal server already running at {address}" in again
        assert "outcome: gate refund_review approved" in again
        assert "Traceback" not in again + err
        await _check_inbox(again)
    finally:
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

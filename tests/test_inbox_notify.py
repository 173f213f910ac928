"""The notice a parked run posts (Slack's format, to a loopback receiver) links straight
to the run's decision page in the tenant's inbox: following it signs the approver in and
lands on that page, with the decision form. (Retries, the JSON format and the webhook URL
kept out of the history: tests/test_gate_notify.py.)"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from inboxkit import PASSWORD, csrf_of, inbox, park_refund
from temporalio.client import Client

from tower.activities.model import ModelSettings
from tower.activities.trust import trust_dir
from worker import build_worker


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A Slack-style incoming webhook on loopback that keeps what it is sent."""
    posts: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            posts.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/services/T0/B0/x", posts
    finally:
        server.shutdown()
        server.server_close()


async def test_the_notice_links_straight_to_the_decision_page(
    client: Client, task_queue: str, db_path: Path,
    receiver: tuple[str, list[dict[str, Any]]],
) -> None:
    hook, posts = receiver
    notify = trust_dir() / client.namespace / "notify.json"
    async with inbox(client) as url, build_worker(client, task_queue=task_queue,
                                                  db_path=db_path, models=ModelSettings()):
        notify.write_text(json.dumps({"url": hook, "format": "slack", "inbox_url": url}))
        try:
            handle = await park_refund(client, task_queue)
            async with asyncio.timeout(30):
                while not any(handle.id in p["text"] for p in posts):
                    await asyncio.sleep(0.1)
        finally:
            notify.unlink()  # the other tests' runs notify nobody
        body = next(p for p in posts if handle.id in p["text"])
        assert "a manager must decide" in body["text"]
        button = body["blocks"][-1]["elements"][0]
        assert button["text"]["text"] == "Decide in the inbox"
        link = button["url"]
        async with httpx.AsyncClient(base_url=url, timeout=60) as approver:
            # Not signed in yet: the sign-in page, which then goes back to the link.
            bounced = await approver.get(link)
            assert bounced.status_code == 303
            login = bounced.headers["location"]
            assert login == f"/login?next={urlsplit(link).path}"
            form = await approver.get(login)
            signed = await approver.post(login, data={
                "name": "alice", "password": PASSWORD, "csrf": csrf_of(form.text)})
            assert signed.status_code == 303 and signed.headers["location"] == f"/runs/{handle.id}"
            page = await approver.get(signed.headers["location"])
        assert page.status_code == 200
        assert f"<h1>{handle.id}</h1>" in page.text and "Gate refund_review" in page.text
        assert 'value="approve"' in page.text and "lower only" in page.text
        await handle.terminate("test over")

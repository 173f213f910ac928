"""A run parking at a gate posts to the tenant's webhook (a retried activity): tested
against a loopback receiver that fails the first post, in Slack's format, with a link
straight to the decision page; the webhook URL never enters the run's history."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from gatekit import new_id, refund_request, wait_pending
from temporalio.client import Client

from tower.activities.model import ModelSettings
from tower.activities.notify import message
from tower.cli.trust_files import dev_trust
from tower.contract.notify import GateNotice, NotifyPolicy
from worker import build_worker
from workflows.refund import RefundAgent


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[tuple[int, dict[str, Any]]]]]:
    """A webhook on loopback: answers 500 to the first post, 200 after; keeps them all."""
    posts: list[tuple[int, dict[str, Any]]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            status = 500 if not posts else 200
            posts.append((status, body))
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hooks/T000/SECRET-PART", posts
    finally:
        server.shutdown()
        server.server_close()


async def test_parked_run_notifies_the_tenants_webhook_with_a_retry(
    client: Client, task_queue: str, db_path: Path, tmp_path: Path,
    receiver: tuple[str, list[tuple[int, dict[str, Any]]]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, posts = receiver
    # The tenant's webhook, in the deployment's trust dir (beside its roster and policy).
    notify = tmp_path / "trust" / client.namespace / "notify.json"
    notify.parent.mkdir(parents=True)
    monkeypatch.setenv("TOWER_TRUST_DIR", str(tmp_path / "trust"))
    dev_trust(tmp_path / "trust", client.namespace, approvers={})  # its roster and policy
    notify.write_text(json.dumps({"url": url, "format": "slack",
                                  "inbox_url": "https://inbox.example.test"}))
    try:
        async with build_worker(client, task_queue=task_queue, db_path=db_path,
                                models=ModelSettings()):
            run = new_id("refund-notify")
            handle = await client.start_workflow(
                RefundAgent.run, refund_request(client, run), id=run, task_queue=task_queue)
            await wait_pending(handle)
            async with asyncio.timeout(30):
                while len(posts) < 2:
                    await asyncio.sleep(0.1)
            await handle.terminate("test over")
    finally:
        notify.unlink()  # the other tests' runs notify nobody
    (first, _), (second, body) = posts
    assert (first, second) == (500, 200)  # the failed post was retried
    assert f"run {handle.id} waits at gate refund_review" in body["text"]
    assert "a manager must decide" in body["text"]
    button = body["blocks"][-1]["elements"][0]
    assert button["url"] == f"https://inbox.example.test/runs/{handle.id}"
    shown = [[e["text"] for e in part["elements"]] for part in body["blocks"][1]["elements"]]
    assert ["amount_cents:  ($1,200.00)"] in shown and ["120000"] in shown  # name, value
    history = readable((await handle.fetch_history()).to_json_dict())
    assert "SECRET-PART" not in history and "hooks/T000" not in history
    assert '"notify_gate"' in history and "notify approvers · gate refund_review" in history


def readable(value: Any) -> str:
    """The history as text with every payload's data decoded (payloads are base64)."""
    if isinstance(value, dict):
        return "{" + ", ".join(
            f"{k!r}: " + (base64.b64decode(v).decode(errors="replace")
                          if k == "data" and isinstance(v, str) else readable(v))
            for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(readable(v) for v in value) + "]"
    return json.dumps(value)


def test_the_json_format_carries_the_notice_as_data() -> None:
    notice = GateNotice(tenant="acme", run="refund 1/2", agent="refund", gate="refund_review",
                        role="manager", node="issue_refund",
                        expires_at=datetime(2030, 1, 1, tzinfo=UTC), proposal={"amount": "$5"})
    body = message(NotifyPolicy(url="https://hooks.test/x", format="json",
                                inbox_url="https://inbox.test/"), notice)
    assert body["event"] == "gate.waiting" and body["role"] == "manager"
    assert body["link"] == "https://inbox.test/runs/refund%201%2F2"
    assert body["expires_at"] == "2030-01-01T00:00:00Z"

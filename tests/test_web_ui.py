"""The Temporal Web UI tells a run's story: headless Chromium opens live runs' pages.

A dev server of its own with the Web UI on a free port. An account run whose model is
a loopback OpenAI-compatible server (the first call asks for lookup_account, the second
hangs until the test ends, so the run sits in `reason` while we look), a refund run
parked at its approval gate on the scripted model, and an order that ended FAILED.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from gatekit import decide, new_id, refund_request, wait_pending
from headless import Browser, chromium_path
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from test_details import HOSTILE

from tower.activities.model import ModelSettings
from tower.cli.devserver import STARTUP_TIMEOUT, temporal_binary
from tower.client import start_run
from tower.client.keys import load_key
from tower.contract import search
from tower.contract.decisions import Verdict
from worker import build_worker
from workflows.account import AccountAgent, AccountRequest
from workflows.order import OrderAgent, OrderRequest
from workflows.refund import RefundAgent

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
# Needs headless Chromium; run with `pytest -m browser` (.ci/run does).
pytestmark = pytest.mark.browser

TOOL_CALL = {
    "id": "cmpl-1", "object": "chat.completion", "created": 0, "model": "loopback-model",
    "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None, "tool_calls": [{
            "id": "call-1", "type": "function", "function": {
                "name": "lookup_account", "arguments": '{"account_id": "ACC-1001"}'}}]}}],
    "usage": {"prompt_tokens": 120, "completion_tokens": 15, "total_tokens": 135},
}


@pytest.fixture
def slow_model() -> Iterator[str]:
    """Answer the first chat completion with a tool call; hold every later one."""
    release = threading.Event()
    calls = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            self.rfile.read(int(self.headers.get("content-length", 0)))
            calls.append(self.path)
            if len(calls) > 1:
                release.wait(120)
            body = json.dumps(TOOL_CALL).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        release.set()
        server.shutdown()
        server.server_close()


@pytest.fixture
async def ui_env() -> AsyncIterator[tuple[WorkflowEnvironment, int]]:
    ui_port = _free_port()
    environment = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(), data_converter=pydantic_data_converter,
        search_attributes=search.ALL, dev_server_log_level="error", ui=True, ui_port=ui_port,
        dev_server_startup_timeout=STARTUP_TIMEOUT)
    try:
        yield environment, ui_port
    finally:
        await environment.shutdown()


async def test_run_page_shows_the_agents_current_state(
    ui_env: tuple[WorkflowEnvironment, int], slow_model: str, tmp_path: Path
) -> None:
    executable = chromium_path()
    if executable is None:
        pytest.skip("chromium is not installed (`apt-get install chromium`; .ci/run does)")
    env, ui_port = ui_env
    client, queue = env.client, f"ui-{uuid.uuid4().hex[:8]}"
    run_id = f"account-ui-{uuid.uuid4().hex[:6]}"
    models = ModelSettings(api_key="loopback-key", base_url=slow_model, models=["loopback-model"],
                           stream=False)  # this hand-written endpoint answers only whole replies
    async with build_worker(client, task_queue=queue, db_path=tmp_path / "tools.sqlite",
                            models=models), \
            build_worker(client, task_queue=f"{queue}-refund", db_path=tmp_path / "rf.sqlite",
                         models=ModelSettings()):
        handle = await client.start_workflow(
            AccountAgent.run, AccountRequest(question="Check my account ACC-1001"),
            id=run_id, task_queue=queue)
        refund_id = new_id("refund-ui")
        refund = await client.start_workflow(
            RefundAgent.run, refund_request(client, refund_id), id=refund_id,
            task_queue=f"{queue}-refund")
        failed_id = f"order-ui-{uuid.uuid4().hex[:6]}"
        failed = await start_run(
            client, OrderAgent, OrderRequest(text="4 x GIZMO-3 to 9 High St, Leeds, GB"),
            id=failed_id, task_queue=f"{queue}-refund")
        rejected_id = new_id("refund-no")
        rejected = await start_run(client, RefundAgent, refund_request(client, rejected_id),
                                   id=rejected_id, task_queue=f"{queue}-refund")
        await _wait_for_node(handle, "reason", step=3)
        await wait_pending(refund)
        await decide(client, rejected, (await wait_pending(rejected))["pending"],
                     verdict=Verdict.REJECT, note=HOSTILE)
        await rejected.result()
        with pytest.raises(WorkflowFailureError):
            await failed.result()
        # The worker answers the UI's queries on this event loop: browse from a thread.
        browser = await asyncio.to_thread(Browser, tmp_path / "chromium-profile", executable)
        try:
            text = await _look(browser, ui_port, run_id, "web-ui-run.png", (
                "state reason", "RUNNING", "step 3", "last move: lookup_account → reason",
                "reason: 2 of 5 visits",
                "model usage: 1 call · 120 prompt + 15 completion tokens"))
            gated = await _look(browser, ui_port, refund_id, "web-ui-approval.png", (
                "AWAITING_APPROVAL", "awaiting approval: gate refund_review",
                "role manager", "amount_cents: 120000  ($1,200.00)",
                f"tower approve {refund_id} --gate refund_review"))
            # A FAILED run is Failed in the Web UI, with its reason as the failure.
            url = f"http://127.0.0.1:{ui_port}/namespaces/default/workflows/{failed_id}"
            await asyncio.to_thread(browser.open, url)
            failure = await asyncio.to_thread(browser.wait_for_text, failed_id, "Failed",
                                              "out of stock: GIZMO-3 (asked 4, 0 left)")
            await asyncio.to_thread(browser.screenshot, ARTIFACTS / "web-ui-failed.png")
            # Closed, it keeps its summary and its Current Details at the end (a worker
            # answers the Web UI's query by replaying it).
            ended = await _look(browser, ui_port, failed_id, "web-ui-closed.png", (
                "Tower agent order", "ended at FAILED", "last error:",
                "out of stock: GIZMO-3 (asked 4, 0 left)"))
            # A hostile note, in the decision and the reply that quotes it: shown as text.
            said = await _look(browser, ui_port, rejected_id, "web-ui-rejected.png", (
                "ended at DONE", "rejected by alice", "[pay here](http://evil.example)",
                "\\x1b[31mred⟨U+202E⟩evil"))
            made = await asyncio.to_thread(browser.evaluate, MADE_FROM_HOSTILE)
        finally:
            await asyncio.to_thread(browser.close)
        await handle.terminate("test over")
        await refund.terminate("test over")
    assert run_id in text and refund_id in gated
    # The header's status badge, then the failure with the reason.
    assert f"FAILED\n{failed_id}" in failure and "out of stock: GIZMO-3" in failure
    assert "amount" in gated  # the proposed refund is on the page
    assert "No Current Details" not in ended and "No summary" not in ended
    assert "# Paid" in said and made == []  # no link, image or heading was made of it
    # What the Web UI shows a reader can sign nothing: no approver's private key is on it.
    for name in ("alice", "bob", "carol", "dana"):
        assert load_key(name)["d"] not in text + gated
    assert (ARTIFACTS / "web-ui-run.png").stat().st_size > 10_000
    # Every activity in the history is labelled with its node and what it calls.
    summaries = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            summaries.append(pydantic_data_converter.payload_converter.from_payload(
                event.user_metadata.summary, str))
    assert summaries == ["reason · model", "lookup_account · tool lookup_account",
                         "reason · model"]


# What the page (and its same-origin frames, where the Web UI renders Markdown) made of
# HOSTILE: links or images to its address, headings of its text.
MADE_FROM_HOSTILE = """(() => {
  const frames = [...document.querySelectorAll('iframe')]
    .map(f => { try { return f.contentDocument; } catch (e) { return null; } })
    .filter(Boolean);
  return [document, ...frames].flatMap(d => [...d.querySelectorAll(
      'a[href*="evil"], img[src*="evil"], h1, h2, h3, h4, h5, h6')]
    .filter(e => e.tagName === 'A' || e.tagName === 'IMG' || e.textContent.includes('Paid'))
    .map(e => e.outerHTML));
})()"""


async def _look(browser: Browser, ui_port: int, run_id: str, shot: str,
                needles: tuple[str, ...]) -> str:
    """Open a run's page, its User Metadata tab, wait for ``needles``; keep a screenshot."""
    url = f"http://127.0.0.1:{ui_port}/namespaces/default/workflows/{run_id}"
    await asyncio.to_thread(browser.open, url)
    await asyncio.to_thread(browser.wait_for_text, run_id, "User Metadata")
    await asyncio.to_thread(browser.click_text, "User Metadata")
    text = await asyncio.to_thread(browser.wait_for_text, "Current Details", *needles)
    await asyncio.to_thread(browser.screenshot, ARTIFACTS / shot)
    return text


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _wait_for_node(handle, node: str, step: int, seconds: float = 30) -> None:
    for _ in range(int(seconds * 10)):
        state = await handle.query("state", result_type=dict)
        if state.get("node") == node and state.get("step") == step:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"run never reached {node} at step {step}: {state}")

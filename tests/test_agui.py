"""The AG-UI endpoint (tower.agui, docs/agui.md) on a real dev server and worker: its
streams pass an independent conformance validator (ag-ui-validate), a refund parks as an
interrupt carrying the rendered proposal, its digest and the edits' schema, and a resume
entry is a decision the gate judges: signed by the endpoint for a signed-in approver, or
by the client itself; a bad one is refused with its code and nothing is paid."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from ag_ui_validate.transport import TransportOptions, validate_body, validate_endpoint
from gatekit import (
    BIG_REFUND,
    ROSTER_RECHECK,
    decision,
    forged_key,
    new_id,
    recorded,
    refunds,
    roster_reads,
    snapshot,
)
from inboxkit import ROLES, inbox, issuer, signed_in
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from termkit import cli_env

from tower.activities.model import ModelSettings
from tower.cli.inbox.app import InboxConfig, serving
from tower.cli.inbox.identity import ProxyAuth
from tower.contract.decisions import GateRecord, digest_of, proposal_digest
from workflows.chat import ChatAgent, ChatInput

pytestmark = pytest.mark.long  # servers, a worker, node: a minute in all

USER = "X-Forwarded-User"


@pytest.fixture(autouse=True)
def streams(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The endpoint reads the stream store the test's worker writes."""
    path = db_path.with_name("streams.sqlite")
    monkeypatch.setenv("TOWER_STREAMS", str(path))
    return path


def proxied(client: Client) -> InboxConfig:
    """An inbox whose users a trusted proxy (this host) names in a header."""
    return InboxConfig(tenant=client.namespace, session_secret="s", issuer=issuer(client),
                       proxy=ProxyAuth(USER, frozenset({"127.0.0.1"}), ROLES))


def run_input(thread: str, *, message: str = BIG_REFUND, resume: list[dict[str, Any]] | None
              = None) -> dict[str, Any]:
    body: dict[str, Any] = {"threadId": thread, "runId": f"r-{uuid.uuid4().hex[:8]}",
                            "messages": [{"id": "u1", "role": "user", "content": message}],
                            "state": {}, "tools": [], "context": [], "forwardedProps": {}}
    if resume is not None:
        body["resume"] = resume
    return body


async def post(url: str, body: dict[str, Any], user: str | None = "alice") -> httpx.Response:
    headers = {USER: user} if user else {}
    async with httpx.AsyncClient(timeout=120) as http:
        return await http.post(url, json=body, headers=headers)


def events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[len("data: "):]) for line in text.splitlines()
            if line.startswith("data: ")]


async def clean(text: str) -> None:
    """ag-ui-validate finds nothing in a recorded stream: 0 errors, 0 warnings."""
    async def body() -> AsyncIterator[bytes]:
        yield text.encode()
    result = await validate_body(body(), "text/event-stream", TransportOptions(recorded=True))
    summary = result.report.summary
    assert (summary.errors, summary.warnings) == (0, 0), result.report.diagnostics


def interrupt_of(seen: list[dict[str, Any]]) -> dict[str, Any]:
    end = seen[-1]
    assert end["type"] == "RUN_FINISHED" and end["outcome"]["type"] == "interrupt", end
    (interrupt,) = end["outcome"]["interrupts"]
    return dict(interrupt)


def resume(interrupt: dict[str, Any], payload: dict[str, Any] | None = None,
           token: str | None = None) -> list[dict[str, Any]]:
    entry: dict[str, Any] = {"interruptId": interrupt["id"], "status": "resolved",
                             "payload": payload or {"verdict": "approve"}}
    if token is not None:
        entry["metadata"] = {"token": token}
    return [entry]


async def park(url: str, thread: str) -> tuple[str, dict[str, Any]]:
    reply = await post(f"{url}/agui/refund", run_input(thread))
    assert reply.status_code == 200, reply.text
    return reply.text, interrupt_of(events(reply.text))


async def test_refund_through_interrupt_and_signed_resume(
        client: Client, task_queue: str, scripted_worker: Any, db_path: Path,
        tmp_path: Path) -> None:
    thread = new_id("agui")
    paced = ModelSettings(scripted_tokens_per_second=400)  # the reply forms word by word
    async with scripted_worker(models=paced), serving(proxied(client), client) as url:
        text, interrupt = await park(url, thread)
        await clean(text)
        recording = tmp_path / "parked.sse"  # and the validator's own command, on the file
        recording.write_text(text)
        validator = Path(sys.executable).with_name("ag-ui-validate")
        checked = subprocess.run([str(validator), str(recording), "--max-warnings", "0",
                                  "--no-color"], capture_output=True, text=True, timeout=60)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        seen = events(text)
        kinds = [e["type"] for e in seen]
        assert kinds[0] == "RUN_STARTED" and kinds[1] == "STATE_SNAPSHOT", kinds
        assert {"STEP_STARTED", "STEP_FINISHED", "TOOL_CALL_START",
                "TOOL_CALL_ARGS", "TOOL_CALL_RESULT", "MESSAGES_SNAPSHOT"} <= set(kinds), kinds
        args = next(e for e in seen if e["type"] == "TOOL_CALL_ARGS")
        assert json.loads(args["delta"]) == {"invoice_id": "INV-2004"}
        # The interrupt: the whole request as rendered, the digest the run's own query gives.
        pending = (await client.get_workflow_handle(thread).query("approvals",
                                                                  result_type=dict))["pending"]
        digest = proposal_digest(GateRecord.model_validate(pending))
        tower = interrupt["metadata"]["tower"]
        assert tower["digest"] == digest == digest_of(tower["proposal"])
        assert interrupt["id"].endswith(digest)
        assert "amount_cents: 120000" in interrupt["message"], interrupt["message"]
        edit = interrupt["responseSchema"]["properties"]["edits"]["properties"]["amount_cents"]
        assert (edit["type"], edit["minimum"], edit["maximum"]) == ("integer", 1, 120000)
        assert refunds(db_path) == []
        # The resume: alice is signed in (the proxy says so); the endpoint signs for her.
        fed: list[str] = []
        result = await validate_endpoint(f"{url}/agui/refund", TransportOptions(
            input=run_input(thread, resume=resume(interrupt, {
                "verdict": "approve", "edits": {"amount_cents": 100000}})),
            headers={USER: "alice"}, timeout_ms=120_000,
            on_event=lambda raw, found: fed.append(raw)))
        summary = result.report.summary
        assert (summary.errors, summary.warnings) == (0, 0), result.report.diagnostics
        kinds = [json.loads(raw)["type"] for raw in fed]
        assert kinds[:2] == ["RUN_STARTED", "STATE_SNAPSHOT"] and "STATE_DELTA" in kinds, kinds
        assert kinds[-1] == "RUN_FINISHED" and "TOOL_CALL_RESULT" in kinds, kinds
        said = [json.loads(raw)["delta"] for raw in fed
                if json.loads(raw)["type"] == "TEXT_MESSAGE_CONTENT"]
        assert len(said) > 3 and "".join(said) == json.loads(fed[-1])["result"]["reply"]
        assert refunds(db_path) == [("INV-2004", 100000)]
        assert (await snapshot(client.get_workflow_handle(thread)))["status"] == "DONE"


NODE = Path(__file__).parent / "agui"


@pytest.fixture
def ts_client(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """tests/agui/ with the official TypeScript client installed (npm, at test time), in
    pytest's cache: a session after the first finds it installed and npm only checks it
    (half a second of CPU, not four), installing again what package.json changed."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are needed to run @ag-ui/client (install Node.js 20)")
    cache = getattr(request.config, "cache", None)  # None under -p no:cacheprovider
    folder = cache.mkdir("agui-client") if cache is not None else tmp_path / "agui-client"
    shutil.copytree(NODE, folder, dirs_exist_ok=True)
    done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent"],
                          cwd=folder, capture_output=True, text=True, timeout=240)
    if done.returncode != 0:
        pytest.skip(f"npm could not install @ag-ui/client: {done.stderr[-500:]}")
    return folder


async def test_typescript_client_drives_a_refund_to_its_payment(
        client: Client, task_queue: str, scripted_worker: Any, db_path: Path,
        ts_client: Path) -> None:
    thread = new_id("agui-ts")
    async with scripted_worker(), serving(proxied(client), client) as url:
        node = await asyncio.create_subprocess_exec(
            "node", str(ts_client / "drive.mjs"), f"{url}/agui/refund", thread, "alice",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(node.communicate(), 120)
    assert node.returncode == 0, err.decode()
    seen = json.loads(out)
    first, then = seen["runs"]
    assert first["events"][0] == "RUN_STARTED" and first["events"][-1] == "RUN_FINISHED"
    assert seen["interrupt"]["metadata"]["tower"]["gate"] == "refund_review"
    assert then["errors"] == [] and then["events"][-1] == "RUN_FINISHED", then
    assert "TOOL_CALL_RESULT" in then["events"] and seen["pending"] == []
    assert seen["state"]["status"] == "DONE" and seen["state"]["refund_id"]
    assert refunds(db_path) == [("INV-2004", 120000)]  # one refund, the amount approved
    approval = seen["state"]["approvals"][-1]["decision"]
    assert (approval["approver"], approval["note"]) == ("alice", "ok from node")


async def refused(url: str, body: dict[str, Any], user: str | None = "alice") -> dict[str, Any]:
    """The AG-UI run of a refused resume: RUN_STARTED, then RUN_ERROR (its code)."""
    reply = await post(f"{url}/agui/refund", body, user)
    assert reply.status_code == 200, reply.text
    await clean(reply.text)
    seen = events(reply.text)
    assert [e["type"] for e in seen] == ["RUN_STARTED", "RUN_ERROR"], seen
    return seen[-1]


async def test_bad_answers_are_refused_with_their_code_and_nothing_moves(
        client: Client, task_queue: str, scripted_worker: Any, db_path: Path) -> None:
    thread, other, done = new_id("agui"), new_id("agui-other"), new_id("agui-done")
    async with scripted_worker(), serving(proxied(client), client) as url:
        _, interrupt = await park(url, thread)
        _, elsewhere = await park(url, other)
        _, closed = await park(url, done)
        handle = client.get_workflow_handle(thread)
        before = await recorded(handle)
        pending = (await handle.query("approvals", result_type=dict))["pending"]
        theirs = (await client.get_workflow_handle(other).query(
            "approvals", result_type=dict))["pending"]
        forged = decision(client, thread, pending, key=forged_key("alice"))["token"]
        assert (await refused(url, run_input(thread, resume=resume(
            interrupt, token=forged))))["code"] == "bad_signature"
        # alice's own genuine token, made for the other run's request.
        stolen = decision(client, other, theirs)["token"]
        assert (await refused(url, run_input(thread, resume=resume(
            interrupt, token=stolen))))["code"] == "wrong_run"
        mistyped = await refused(url, run_input(thread, resume=resume(
            interrupt, {"verdict": "approve", "edits": {"amount_cents": True}})))
        assert mistyped["code"] == "bad_edit", mistyped
        # The other run's interrupt, answered on this thread by a signed-in approver.
        assert (await refused(url, run_input(thread, resume=resume(
            elsewhere))))["code"] == "wrong_run"
        # carol's roles decide no gate: for her the thread does not exist.
        hidden = await post(f"{url}/agui/refund", run_input(thread, resume=resume(interrupt)),
                            user="carol")
        assert hidden.status_code == 404, hidden.text
        # Another agent's run is no refund thread, whoever asks.
        chat = await client.start_workflow(ChatAgent.run, ChatInput(), id=new_id("chat"),
                                           task_queue=task_queue)
        assert (await post(f"{url}/agui/refund", run_input(chat.id))).status_code == 404
        await chat.terminate()
        assert await recorded(handle) == before and refunds(db_path) == []
        # dana's own genuine token, claiming a role she does not hold (mis-scoped): the run
        # reads its roster again (she may have been given it since), then refuses it.
        state, reads = await snapshot(handle), await roster_reads(handle)
        scoped = decision(client, thread, pending, approver="dana", role="manager")["token"]
        assert (await refused(url, run_input(thread, resume=resume(
            interrupt, token=scoped))))["code"] == "not_authorized"
        assert await snapshot(handle) == state and await roster_reads(handle) == reads + 1
        now = await recorded(handle)
        assert now[:len(before)] == before and set(now[len(before):]) <= ROSTER_RECHECK
        assert refunds(db_path) == []
        # An interrupt no longer open: rejected once (the run declines), answered again.
        reply = await post(f"{url}/agui/refund", run_input(done, resume=resume(
            closed, {"verdict": "reject", "note": "no"})))
        assert events(reply.text)[-1]["type"] == "RUN_FINISHED", reply.text
        again = await refused(url, run_input(done, resume=resume(closed)))
        assert again["code"] == "not_pending", again
        assert refunds(db_path) == []


@contextlib.asynccontextmanager
async def endpoint_process(env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[str]:
    """tests/aguiserve.py (a team's app mounting tower.agui) as a uvicorn process of its own:
    its base URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = Path(__file__).parent
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "uvicorn", "--factory", "aguiserve:make", "--port", str(port),
        "--log-level", "warning", cwd=root.parent, env=cli_env(
            env.client.service_client.config.target_host, PYTHONPATH=f"{root}:{root.parent}",
            AGUI_TASK_QUEUE=task_queue,
            TOWER_STREAMS=os.environ["TOWER_STREAMS"],
            AGUI_USERS=";".join(f"{n}={','.join(r)}" for n, r in ROLES.items())))
    try:
        async with asyncio.timeout(60), httpx.AsyncClient() as http:
            while True:
                try:
                    await http.get(f"http://127.0.0.1:{port}/")
                    break
                except httpx.TransportError:
                    assert server.returncode is None, "the endpoint process stopped"
                    await asyncio.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        await server.wait()


async def test_two_endpoint_processes_one_run_and_a_dropped_stream_taken_up(
        env: WorkflowEnvironment, client: Client, task_queue: str, scripted_worker: Any,
        db_path: Path) -> None:
    """The run starts on one process and resumes on the other; the resume's stream, dropped
    on the first, is taken up on the second where it stopped: nothing twice."""
    issuer(client)
    thread = new_id("agui-2")
    async with (scripted_worker(), endpoint_process(env, task_queue) as one,
                endpoint_process(env, task_queue) as two):
        text, interrupt = await park(one, thread)
        await clean(text)
        body = run_input(thread, resume=resume(interrupt))
        frames, last = [], ""
        async with (httpx.AsyncClient(timeout=120) as http,
                    http.stream("POST", f"{two}/agui/refund", json=body,
                                headers={USER: "alice"}) as reply):
            assert reply.status_code == 200
            frame: list[str] = []
            async for line in reply.aiter_lines():
                if line:
                    frame.append(line)
                    continue
                frames.append("\n".join(frame))
                ids = [f[len("id: "):] for f in frame if f.startswith("id: ")]
                frame = []
                if ids:
                    last = ids[0]
                    break  # the connection drops after the first frame with an id
        assert last and "RUN_FINISHED" not in "".join(frames), frames
        async with httpx.AsyncClient(timeout=120) as http:
            rest = await http.post(f"{one}/agui/refund", json=body,
                                   headers={USER: "alice", "Last-Event-ID": last})
        assert rest.status_code == 200, rest.text
        assert "RUN_STARTED" not in rest.text and "RUN_FINISHED" in rest.text, rest.text
        whole = "\n\n".join(frames) + "\n\n" + rest.text
        await clean(whole)
        seen = events(whole)
        assert [e["type"] for e in seen].count("RUN_STARTED") == 1
        assert seen[-1]["type"] == "RUN_FINISHED" and "outcome" in seen[-1]
        assert seen[-1]["outcome"]["type"] == "success", seen[-1]
        calls = [(e["toolCallId"], e["toolCallName"]) for e in seen
                 if e["type"] == "TOOL_CALL_START"]
        # The gate's re-check of the invoice, then the payment: each once.
        assert [name for _, name in calls] == ["invoice_balance", "issue_refund"], calls
        assert len(set(calls)) == 2
        steps = [e["stepName"] for e in seen if e["type"] == "STEP_STARTED"]
        assert steps == [e["stepName"] for e in seen if e["type"] == "STEP_FINISHED"], seen
        assert refunds(db_path) == [("INV-2004", 120000)]


async def test_the_inbox_serves_it_to_its_signed_in_users_only(
        client: Client, task_queue: str, scripted_worker: Any, db_path: Path) -> None:
    """In `tower inbox` the endpoint takes the session's user: none, no run; a form post
    (what a cross-site page can send with the cookie) is refused before anything starts."""
    thread = new_id("agui-inbox")
    async with scripted_worker(), inbox(client) as url:
        anonymous = await post(f"{url}/agui/refund", run_input(thread), user=None)
        assert anonymous.status_code == 401
        session = await signed_in(url, "alice")
        async with contextlib.aclosing(session):
            form = await session.post("/agui/refund", data={"threadId": thread})
            assert form.status_code == 415, form.text
            with pytest.raises(RPCError):
                await client.get_workflow_handle(thread).describe()  # nothing started
            reply = await session.post("/agui/refund", json=run_input(thread))
            assert reply.status_code == 200, reply.text
            await clean(reply.text)
            interrupt = interrupt_of(events(reply.text))
            reply = await session.post("/agui/refund", json=run_input(
                thread, resume=resume(interrupt)))
            assert events(reply.text)[-1]["type"] == "RUN_FINISHED", reply.text
        assert refunds(db_path) == [("INV-2004", 120000)]
        decided = (await snapshot(client.get_workflow_handle(thread)))["approvals"][-1]
        assert decided["decision"]["approver"] == "alice"

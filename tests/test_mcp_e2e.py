"""MCP tools in real runs on the dev server: an agent uses the notes server's read-only
lookup, idempotent save and destructive delete; the delete waits at a gate; killing
the worker or the MCP server mid-delete still leaves exactly one deletion; a
non-idempotent call whose outcome is unknown is not retried; the worker refuses to
start with an unknown or ungated tool."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gatekit import decide, wait_pending
from mcp_notes.agent import CleanupRequest, NotesCleanupAgent, NotesPurgeAgent, NotesTidyAgent
from mcp_notes.fixtures import HttpNotesServer, http_server, http_tenant, stdio_tenant
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle

from tower.activities.mcp import McpPolicyError, McpSources, load_sources
from tower.activities.mcp.catalogue import discover
from tower.cli.trust_files import enrol
from tower.contract.decisions import Verdict
from worker import build_worker

pytestmark = pytest.mark.long

TOKEN = "notes-token"
HERE = Path(__file__).parent


def seeded(db: Path, note_id: str = "n1", text: str = "call Ada back") -> Path:
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS notes (id TEXT PRIMARY KEY, text TEXT)")
        conn.execute("CREATE TABLE IF NOT EXISTS deletions (seq INTEGER PRIMARY KEY, "
                     "note_id TEXT, idempotency_key TEXT UNIQUE)")
        conn.execute("INSERT INTO notes VALUES (?, ?)", (note_id, text))
    return db


def notes(db: Path) -> dict[str, str]:
    with sqlite3.connect(db) as conn:
        return dict(conn.execute("SELECT id, text FROM notes").fetchall())


def requests(db: Path) -> int:
    """How many delete requests reached the notes server (it logs each on arrival)."""
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM delete_requests").fetchone()[0])


def deletions(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [r[0] for r in conn.execute("SELECT note_id FROM deletions").fetchall()]


@pytest.fixture(autouse=True)
def editor(trust: Path, client: Client) -> None:
    """erin may approve a note's deletion: an editor in the tenant's roster."""
    enrol(trust, client.namespace, "erin", config=Path(os.environ["TOWER_CONFIG_DIR"]),
          roles=["editor"])


async def sources(tenant: Any) -> McpSources:
    return McpSources(tenant, await discover(tenant))


async def final_state(handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
    """The run's state once it has ended, DONE or FAILED."""
    with contextlib.suppress(WorkflowFailureError):
        await handle.result()
    state: dict[str, Any] = await handle.query("state", result_type=dict)
    return state


async def delete_requested(db: Path) -> None:
    """Until the notes server has received a delete request (it logs each on arrival)."""
    async with asyncio.timeout(60):
        while True:
            with (contextlib.suppress(sqlite3.OperationalError),  # no table before its first call
                  contextlib.closing(sqlite3.connect(db)) as conn):
                if conn.execute("SELECT COUNT(*) FROM delete_requests").fetchone()[0]:
                    return
            await asyncio.sleep(0.05)


async def delete_in_flight(handle: WorkflowHandle[Any, Any]) -> None:
    """Until the run's notes.delete_note activity has been picked up by a worker."""
    async with asyncio.timeout(60):
        while True:
            desc = await handle.describe()
            if any(a.activity_type.name == "notes.delete_note" and a.state == 2  # STARTED
                   for a in desc.raw_description.pending_activities):
                return
            await asyncio.sleep(0.1)


async def test_worker_start_refuses_unknown_and_ungated_tools(
    client: Client, task_queue: str, db_path: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Listed twice, under two policies, over HTTP: one server process (over stdio, each
    # listing starts one; the all-three-tools run below lists and calls over stdio).
    monkeypatch.setenv("NOTES_MCP_AUTH", f"Bearer {TOKEN}")
    with http_server(seeded(tmp_path / "notes.sqlite"), TOKEN) as server:
        mcp = await sources(http_tenant(server.url))
        # The tenant's policy may waive the gate, explicitly, per tool.
        waived = await sources(http_tenant(server.url,
                                           tools={"notes.delete_note": {"gate": False}}))
    with pytest.raises(McpPolicyError, match=r"notes_purge.*'delete'.*notes.delete_note.*"
                                             r"approval gate before it \(destructiveHint\)"):
        build_worker(client, task_queue=task_queue, db_path=db_path,
                     workflows=[NotesPurgeAgent], mcp=mcp)
    missing = McpSources(mcp.tenant, {k: v for k, v in mcp.tools.items()
                                      if k != "notes.save_note"})
    with pytest.raises(McpPolicyError, match="names MCP tool 'notes.save_note', which no "
                                             "configured server lists"):
        build_worker(client, task_queue=task_queue, db_path=db_path,
                     workflows=[NotesCleanupAgent], mcp=missing)
    build_worker(client, task_queue=task_queue, db_path=db_path,
                 workflows=[NotesPurgeAgent], mcp=waived)


async def test_a_tool_that_lies_about_being_read_only_is_gated_and_runs_at_most_once(
    client: Client, task_queue: str, db_path: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``notes.forget_note`` deletes but claims ``readOnlyHint`` (issue 24). By default the
    deployment does not take its server's word: the worker refuses to start an agent that
    calls it ungated. With the gate waived (and still not trusted), a call that times out
    after the request went out is not retried as a read: one deletion, the run FAILED with
    the reason."""
    db = seeded(tmp_path / "notes.sqlite")
    monkeypatch.setenv("NOTES_MCP_AUTH", f"Bearer {TOKEN}")
    with http_server(db, TOKEN, slow_delete=3) as server:  # its own process: it finishes
        mcp = await sources(http_tenant(server.url, trust_hints=False, tools={
            "notes.lookup_note": {"read_only": True}, "notes.save_note": {"gate": False}}))
        with pytest.raises(McpPolicyError, match=r"notes_tidy.*'tidy'.*notes.forget_note.*"
                                                 r"approval gate before it \(its server's "
                                                 r"hints are not"):
            build_worker(client, task_queue=task_queue, db_path=db_path,
                         workflows=[NotesTidyAgent], mcp=mcp)
        # The deployment's word: lookup_note only reads, save_note needs no gate.
        build_worker(client, task_queue=f"{task_queue}-reads", db_path=db_path,
                     workflows=[NotesCleanupAgent], mcp=mcp)
        waived = await sources(http_tenant(server.url, trust_hints=False, timeout=1,
                                           tools={"notes.forget_note": {"gate": False}}))
        async with build_worker(client, task_queue=task_queue, db_path=db_path,
                                workflows=[NotesTidyAgent], mcp=waived):
            handle = await client.start_workflow(
                NotesTidyAgent.run, CleanupRequest(note_id="n1"),
                id=f"tidy-{uuid.uuid4().hex[:8]}", task_queue=task_queue)
            state = await final_state(handle)
            history = await handle.fetch_history()
        async with asyncio.timeout(30):  # the one call, still sleeping server-side, commits
            while not deletions(db):
                await asyncio.sleep(0.1)
    assert state["status"] == "FAILED"
    assert any("not idempotent" in e for e in state["errors"]), state["errors"]
    # The first attempt timed out mid-call; the second refused to call again.
    failure = next(e.activity_task_failed_event_attributes.failure for e in history.events
                   if e.HasField("activity_task_failed_event_attributes"))
    assert failure.application_failure_info.type == "McpOutcomeUnknown", failure
    assert deletions(db) == ["n1"] and requests(db) == 1  # the server was called once


async def test_an_agent_uses_all_three_tools_and_the_delete_waits_at_a_gate(
    client: Client, task_queue: str, db_path: Path, tmp_path: Path
) -> None:
    db = seeded(tmp_path / "notes.sqlite")
    mcp = await sources(stdio_tenant(db))
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            workflows=[NotesCleanupAgent], mcp=mcp):
        run = f"notes-{uuid.uuid4().hex[:8]}"
        handle = await client.start_workflow(
            NotesCleanupAgent.run, CleanupRequest(note_id="n1"),
            id=run, task_queue=task_queue)
        pending = await wait_pending(handle, timeout=60)
        # Parked before the destructive call: archived, not yet deleted.
        assert notes(db) == {"n1": "call Ada back", "archive-n1": "call Ada back"}
        assert deletions(db) == []
        await decide(client, handle, pending["pending"], verdict=Verdict.APPROVE,
                     approver="erin", role="editor")
        state = await final_state(handle)
    assert state["status"] == "DONE", state["errors"]
    assert state["outcome"] == "deleted (deletion #1)"
    assert state["shown_tools"] == ["notes.lookup_note"]  # the model saw only its node's tool
    assert notes(db) == {"archive-n1": "call Ada back"} and deletions(db) == ["n1"]
    history = await handle.fetch_history()
    called = [e.activity_task_scheduled_event_attributes.activity_type.name
              for e in history.events if e.HasField("activity_task_scheduled_event_attributes")]
    assert {"notes.lookup_note", "notes.save_note", "notes.delete_note"} <= set(called)


# The worker's start-up as worker.py's main() does it, in a fresh interpreter: which
# tenant's configuration makes it import the MCP SDK (~25 MB of a worker's idle RSS).
STARTUP = """
import asyncio, sys
from tower.activities.mcp import load_sources
from tower.client.connection import connect
from worker import build_worker

async def start(config):
    client = await connect()
    mcp = await load_sources(client.namespace, config)
    build_worker(client, task_queue="mcp-import-check", db_path=sys.argv[3], mcp=mcp)
    print(sorted(mcp.tools), "mcp" in sys.modules, flush=True)

asyncio.run(start(sys.argv[1]))
asyncio.run(start(sys.argv[2]))
"""


async def test_a_worker_without_mcp_servers_does_not_import_the_sdk(
    client: Client, tmp_path: Path
) -> None:
    none = tmp_path / "none.json"
    none.write_text(json.dumps({"tenants": {client.namespace: {}}}))
    listed = tmp_path / "notes.json"
    listed.write_text(json.dumps({"tenants": {client.namespace: stdio_tenant(
        seeded(tmp_path / "notes.sqlite")).model_dump(exclude_defaults=True)}}))
    env = {**os.environ, "TEMPORAL_ADDRESS": client.service_client.config.target_host,
           "TEMPORAL_NAMESPACE": client.namespace}
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", STARTUP, str(none), str(listed), str(tmp_path / "tools.sqlite"),
        cwd=HERE.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await child.communicate()
    assert child.returncode == 0, err.decode()
    # No servers listed: no SDK. Then the same start-up with the notes server loads it.
    assert out.decode().splitlines() == [
        "[] False", "['notes.delete_note', 'notes.forget_note', 'notes.lookup_note', "
        "'notes.save_note'] True"]


class WorkerProc:
    """tests/mcp_notes/worker_main.py as a process that can be SIGKILLed."""

    def __init__(self, client: Client, task_queue: str, config: Path, log: Path) -> None:
        self.env = {**os.environ, "TEMPORAL_ADDRESS": client.service_client.config.target_host,
                    "TEMPORAL_NAMESPACE": client.namespace, "TOWER_TASK_QUEUE": task_queue,
                    "TOWER_MCP_CONFIG": str(config), "NOTES_MCP_AUTH": f"Bearer {TOKEN}",
                    "TOWER_DB": str(config.with_name("tools.sqlite")), "PYTHONUNBUFFERED": "1"}
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProc:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen([sys.executable, str(HERE / "mcp_notes" /
                                                             "worker_main.py")],
                                         env=self.env, stdout=out, stderr=subprocess.STDOUT)
        return self

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture
def workers() -> Iterator[list[WorkerProc]]:
    started: list[WorkerProc] = []
    yield started
    for w in started:
        w.kill9()


def write_config(path: Path, url: str, honours: bool) -> Path:
    policy = {"gate": False, "honours_idempotency_key": honours}
    path.write_text(json.dumps({"tenants": {"default": {
        "servers": {"notes": {"url": url, "headers": {"Authorization": "NOTES_MCP_AUTH"},
                              "timeout_seconds": 6, "trust_hints": True}},
        "tools": {"notes.delete_note": policy}}}}))
    return path


async def test_killing_the_worker_mid_delete_leaves_one_deletion(
    client: Client, task_queue: str, tmp_path: Path, workers: list[WorkerProc],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db = seeded(tmp_path / "notes.sqlite")
    server = HttpNotesServer(db, TOKEN, slow_delete=2).start()
    monkeypatch.setenv("NOTES_MCP_AUTH", f"Bearer {TOKEN}")
    try:
        config = write_config(tmp_path / "mcp.json", server.url, honours=True)
        first = WorkerProc(client, task_queue, config, tmp_path / "w1.log").start()
        workers.append(first)
        handle = await client.start_workflow(
            NotesPurgeAgent.run, CleanupRequest(note_id="n1"),
            id=f"purge-{uuid.uuid4().hex[:8]}", task_queue=task_queue)
        await delete_in_flight(handle)
        await delete_requested(db)
        first.kill9()
        # The worker that takes over: the same configuration, in this process.
        async with build_worker(client, task_queue=task_queue, db_path=tmp_path / "tools.sqlite",
                                workflows=[NotesPurgeAgent],
                                mcp=await load_sources(client.namespace, config)):
            state = await final_state(handle)
    finally:
        server.kill()
    assert state["status"] == "DONE", state["errors"]
    assert deletions(db) == ["n1"]  # the retry found the first attempt's deletion by key


async def server_killed_mid_delete(client: Client, task_queue: str, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch, *, honours: bool
                                   ) -> tuple[dict[str, Any], Path]:
    """A purge over HTTP whose notes server is killed mid-delete and restarted (same port,
    same database): the run's final state and the notes database. (The worker is not what
    dies here: it runs in this process, with the configuration worker_main.py loads.)"""
    db = seeded(tmp_path / "notes.sqlite")
    server = HttpNotesServer(db, TOKEN, slow_delete=2).start()
    monkeypatch.setenv("NOTES_MCP_AUTH", f"Bearer {TOKEN}")
    try:
        config = write_config(tmp_path / "mcp.json", server.url, honours=honours)
        mcp = await load_sources(client.namespace, config)
        async with build_worker(client, task_queue=task_queue, db_path=tmp_path / "tools.sqlite",
                                workflows=[NotesPurgeAgent], mcp=mcp):
            handle = await client.start_workflow(
                NotesPurgeAgent.run, CleanupRequest(note_id="n1"),
                id=f"purge-{uuid.uuid4().hex[:8]}", task_queue=task_queue)
            await delete_in_flight(handle)
            await delete_requested(db)
            server.kill()  # mid-call: the deletion never commits
            server.start()
            return await final_state(handle), db
    finally:
        server.kill()


async def test_killing_the_mcp_server_mid_delete_leaves_one_deletion(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, db = await server_killed_mid_delete(client, task_queue, tmp_path, monkeypatch,
                                               honours=True)
    assert state["status"] == "DONE", state["errors"]
    assert deletions(db) == ["n1"]


async def test_a_non_idempotent_call_is_not_retried_once_it_may_have_acted(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, db = await server_killed_mid_delete(client, task_queue, tmp_path, monkeypatch,
                                               honours=False)
    assert state["status"] == "FAILED"
    assert any("not idempotent" in e for e in state["errors"]), state["errors"]
    assert deletions(db) == [] and "n1" in notes(db)  # not retried: nothing deleted twice


async def test_the_docs_clock_example_runs(client: Client, task_queue: str, db_path: Path,
                                           tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    """docs/mcp.md's worked example, literally: its mcp.json and its agent file, with the
    official reference server mcp-server-time."""
    page = (HERE.parent / "docs" / "mcp.md").read_text()
    config = json.loads(page.split("```json\n", 1)[1].split("```", 1)[0])
    server = config["tenants"]["default"]["servers"]["time"]
    server["command"][0] = sys.executable  # "python": this interpreter, where it is installed
    config["tenants"][client.namespace] = config["tenants"].pop("default")
    (tmp_path / "mcp.json").write_text(json.dumps(config))
    source = page.split("```python\n", 1)[1].split("```", 1)[0]
    (tmp_path / "docs_clock.py").write_text(source)
    monkeypatch.syspath_prepend(tmp_path)  # the sandbox imports the agent's module by name
    clock = importlib.import_module("docs_clock")
    mcp = await load_sources(client.namespace, tmp_path / "mcp.json")
    assert mcp.tools["time.get_current_time"].read_only
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            workflows=[clock.ClockAgent], mcp=mcp):
        state = await client.execute_workflow(
            clock.ClockAgent.run, clock.ClockRequest(zone="Asia/Tokyo"),
            id=f"clock-{uuid.uuid4().hex[:8]}", task_queue=task_queue)
    assert state.status == "DONE"
    assert state.time.endswith("+09:00")  # Tokyo's offset, from the real server

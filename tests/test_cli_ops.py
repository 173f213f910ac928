"""Operational edges of the CLI on the real dev server: no worker, followed runs that end
while followed, runs that wait for outside input, `--json` that is data only. `tower` runs
as its own process (forked from tests/towercli.py's server, or the installed script)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import WorkerFactory
from gatekit import refund_request, wait_pending
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment
from test_cli import address_of, tower
from test_cli_live import tower_env

from tower.cli.live import watch
from workflows.account import AccountAgent, AccountRequest

TOWER = str(Path(sys.executable).parent / "tower")


async def test_pending_and_list_need_no_worker_and_state_says_one_is_missing(
    env: WorkflowEnvironment, task_queue: str, db_path: Path, scripted_worker: WorkerFactory
) -> None:
    address, client = address_of(env), env.client
    run = f"nowork-{task_queue}"
    async with scripted_worker():
        handle = await client.start_workflow("refund", refund_request(client, run), id=run,
                                             task_queue=task_queue)
        await wait_pending(handle)
    # The worker is gone: only visibility can answer now.
    for _ in range(40):  # visibility is eventually consistent
        code, out, err = await tower(address, "pending", "--json")
        rows = [r for r in json.loads(out) if r["run"] == run]
        if rows:
            break
        await asyncio.sleep(0.25)
    assert code == 0, err
    [row] = rows
    assert row["agent"] == "refund" and row["gate"] == "refund_review"
    assert row["role"] == "manager" and row["when"] == "before" and row["expires_at"]
    assert row["proposal"]["amount"] == "$1,200.00" and row["editable"] == ["amount_cents"]
    code, out, _ = await tower(address, "pending")
    assert code == 0 and run in out and "amount: $1,200.00" in out
    code, out, _ = await tower(address, "list", "--status", "AWAITING_APPROVAL", "--json")
    assert code == 0 and run in [r["run"] for r in json.loads(out)]

    code, out, err = await tower(address, "state", run)
    assert code == 2 and out == ""
    assert err.startswith(f"error: run {run!r} is running and only a worker can answer")
    assert f"no worker answers on its task queue {task_queue!r}" in err
    assert len(err.splitlines()) == 1
    # Said from the worker's own heartbeat (it shut down), not after a query timed out:
    # the server still lists it as a poller for a minute.
    assert "no answer in" not in err
    # A decision needs the run's pending gate, which only a worker can tell: said, not hung.
    code, out, err = await tower(address, "approve", "--yes",
                                 run, "--by", "alice", "--role", "manager")
    assert code == 2 and f"no worker answers on its task queue {task_queue!r}" in err, err
    assert "no answer in" not in err
    assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING  # nothing sent
    await handle.terminate("test over")


async def test_a_run_waiting_for_an_outside_event_is_not_followed_forever(
    env: WorkflowEnvironment, task_queue: str, db_path: Path, scripted_worker: WorkerFactory
) -> None:
    address, run = address_of(env), f"idle-{task_queue}"
    async with scripted_worker():
        code, out, err = await tower(
            address, "run", "lifecycle", "--input", '{"goal": "Check ACC-1001", "start": false}',
            "--id", run, "--task-queue", task_queue, "--json")
        assert code == 0, err
        end = json.loads(out.splitlines()[-1])
        assert end["event"] == "end" and end["status"] == "RUNNING"
        assert end["waiting_for_input"] is True
        # The printed link is the real UI's (TOWER_UI_URL here), not always :8233.
        code, out, err = await tower_env(
            address, {"TOWER_UI_URL": "https://ui.example.com/"}, "run", "account", "--input",
            '{"question": "Check ACC-1001"}', "--id", f"ui-{task_queue}", "--task-queue",
            task_queue, "--json")
        end = json.loads(out.splitlines()[-1])
        assert code == 0 and end["status"] == "DONE", err
        assert end["web_ui"] == f"https://ui.example.com/namespaces/default/workflows/ui-{task_queue}"
    await env.client.get_workflow_handle(run).terminate("test over")


async def test_24_runs_followed_while_they_end_show_every_transition(
    client: Client, task_queue: str, db_path: Path, scripted_worker: WorkerFactory
) -> None:
    """`tower run --json` follows with ``watch``: each of 24 concurrent runs, followed from
    its start, shows all four moves, the last one (-> DONE) included."""
    async with scripted_worker():
        handles = [await client.start_workflow(
            AccountAgent.run, AccountRequest(question=f"Check ACC-100{i % 3 + 1}"),
            id=f"follow-{task_queue}-{i}", task_queue=task_queue) for i in range(24)]
        outs = [io.StringIO() for _ in handles]
        ends = await asyncio.gather(*(watch(h, as_json=True, out=o, poll_seconds=0.05)
                                      for h, o in zip(handles, outs, strict=True)))
    for end, out in zip(ends, outs, strict=True):
        moves = [json.loads(line) for line in out.getvalue().splitlines()]
        assert end.status == "DONE" and moves[-1]["target"] == "DONE", out.getvalue()
        assert [m["step"] for m in moves] == list(range(1, len(moves) + 1))


async def test_inspect_json_is_data(
    env: WorkflowEnvironment, task_queue: str, db_path: Path, scripted_worker: WorkerFactory
) -> None:
    address, run = address_of(env), f"inspect-{task_queue}"
    async with scripted_worker():
        await env.client.execute_workflow(AccountAgent.run,
                                          AccountRequest(question="Check ACC-1001"), id=run,
                                          task_queue=task_queue)
    code, out, err = await tower(address, "inspect", run, "--step", "2", "--json")
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    assert data["run"] == run and data["agent"] == "account" and data["status"] == "DONE"
    assert [(t["source"], t["target"]) for t in data["transitions"]][-1] == ("reason", "DONE")
    assert data["state_after_step"]["step"] == 2
    assert data["state_after_step"]["node"] == "lookup_account"


async def test_tracing_run_json_prints_only_json_on_stdout(
    env: WorkflowEnvironment, task_queue: str, db_path: Path, scripted_worker: WorkerFactory
) -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TEMPORAL_"))}
    environ.update({"TEMPORAL_ADDRESS": address_of(env), "TOWER_TRACING": "1"})
    async with scripted_worker():
        proc = await asyncio.create_subprocess_exec(
            TOWER, "run", "account", "--input", '{"question": "Check ACC-1002"}',
            "--task-queue", task_queue, "--json", env=environ, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    events = [json.loads(line) for line in out.decode().splitlines()]  # every line is JSON
    assert events[0]["event"] == "started" and events[-1]["status"] == "DONE"
    assert '"name": "StartWorkflow:account"' in err.decode(), "the spans went to stderr"

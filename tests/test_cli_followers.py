"""A run that fails before its first step ends every follower, with the reason and a
non-zero exit: `tower run`, `tower watch`, `tower chat`; `tower inspect` shows the reason.

Two such failures, on the real dev server: the tenant's trust missing (the lifecycle agent
loads its roster and policy first: TrustMissing), and a raw start whose input the worker
cannot open (its agent refuses it: the run never started). Neither reaches a terminal node,
so the run's own ``status`` query never says it ended: the followers read the execution's
status.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import WorkerFactory
from temporalio.api.common.v1 import Payloads, WorkflowType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import StartWorkflowExecutionRequest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from test_cli import TOWER, address_of, cli_env, tower
from test_redteam_payloads import UNOPENABLE, tower_client
from towercli import until_connected

from tower.client import follow
from tower.client.errors import NeverStarted
from workflows.account import AccountAgent

FORGED = UNOPENABLE["a store the worker does not have"]


async def guarded_worker_client(client: Client, tmp_path: Path) -> Client:
    """A client with Tower's converter (as `python worker.py` has): its worker refuses an
    input it cannot open instead of failing the task again and again."""
    return await tower_client(client, tmp_path / "payloads", {})


async def start_unopenable(client: Client, agent: str, task_queue: str) -> str:
    """A raw start of ``agent`` whose input no worker can open: it fails at its first task."""
    run = f"{agent}-{uuid.uuid4().hex[:8]}"
    await client.workflow_service.start_workflow_execution(StartWorkflowExecutionRequest(
        namespace=client.namespace, workflow_id=run, workflow_type=WorkflowType(name=agent),
        task_queue=TaskQueue(name=task_queue), input=Payloads(payloads=[FORGED]),
        request_id=uuid.uuid4().hex, identity="mallory"))
    return run


async def closed_at(client: Client, run: str) -> float:
    """When the run's execution closed, as a time.time() value."""
    info = await client.get_workflow_handle(run).describe()
    assert info.close_time is not None and info.status == WorkflowExecutionStatus.FAILED
    return info.close_time.timestamp()


async def test_tower_run_of_a_run_without_trust_ends_with_the_reason(
    env: WorkflowEnvironment, task_queue: str, tmp_path: Path, scripted_worker: WorkerFactory,
) -> None:
    address, run = address_of(env), f"lifecycle-{task_queue}"
    async with scripted_worker(trust_dir=tmp_path / "no-trust"):
        code, out, err = await tower(
            address, "run", "lifecycle", "--input", '{"goal": "Check ACC-1001"}', "--id", run,
            "--task-queue", task_queue)
        ended = time.time()
        assert code == 1, (out, err)
        assert "status: FAILED" in out and "reason: TrustMissing: " in out, out
        assert "no roster.json for tenant 'default'" in out
        print(f"`tower run` exited {ended - await closed_at(env.client, run):.2f} s after "
              "the run failed")

        code, out, _ = await tower(address, "run", "lifecycle", "--input",
                                   '{"goal": "Check ACC-1001"}', "--task-queue", task_queue,
                                   "--json")
        end = json.loads(out.splitlines()[-1])
        assert code == 1 and end["event"] == "end" and end["status"] == "FAILED"
        assert end["reason"].startswith("TrustMissing: ")

        # The record says it too, worker or not.
        code, out, err = await tower(address, "inspect", run)
        assert code == 0, err
        assert "ended FAILED" in out and "TrustMissing: " in out, out
        code, out, _ = await tower(address, "inspect", run, "--json")
        assert code == 0 and json.loads(out)["reason"].startswith("TrustMissing: ")


async def test_watch_chat_and_inspect_of_a_run_whose_input_cannot_be_opened(
    env: WorkflowEnvironment, task_queue: str, tmp_path: Path, scripted_worker: WorkerFactory,
) -> None:
    """Each follower is waiting on the run before any worker touched it; then the worker
    fails it at its first task."""
    address, client = address_of(env), env.client
    run = await start_unopenable(client, "account", task_queue)
    thread = await start_unopenable(client, "chat", task_queue)
    watcher = await asyncio.create_subprocess_exec(
        TOWER, "watch", run, "--json", env=cli_env(address), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE)
    chat = await asyncio.create_subprocess_exec(
        TOWER, "chat", thread, "-m", "hello", env=cli_env(address), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE)
    port = int(address.rsplit(":", 1)[1])
    await until_connected(watcher.pid, port)
    await until_connected(chat.pid, port)
    async with scripted_worker(await guarded_worker_client(client, tmp_path)):
        (w_out, w_err), (c_out, c_err) = await asyncio.wait_for(asyncio.gather(
            watcher.communicate(), chat.communicate()), 60)
        stopped = time.time()
        print(f"watch and chat exited {stopped - await closed_at(client, run):.2f} s / "
              f"{stopped - await closed_at(client, thread):.2f} s after their runs failed")
    assert watcher.returncode == 1, w_err.decode()
    end = json.loads(w_out.decode().splitlines()[-1])
    assert end["error"].startswith(f"run {run} never started: its input was refused (the "
                                   "input could not be opened: "), end
    assert chat.returncode == 2, (c_out, c_err)
    said = c_err.decode()
    assert (f"error: thread run '{thread}' ended FAILED: InputRefused: the input could not "
            "be opened") in said, said

    # Once closed: `tower chat THREAD` and `tower watch` say why at once, `inspect` too.
    code, _, err = await tower(address, "chat", thread, "-m", "again")
    assert code == 2 and "is closed (FAILED: InputRefused: the input could not" in err, err
    for command in ("watch", "inspect"):
        code, out, err = await tower(address, command, run)
        assert code == 1 and out == "" and err.count("\n") == 1, (command, out, err)
        assert f"run {run} never started: its input was refused (the input could" in err, err


async def test_the_client_follows_a_run_to_its_failure(
    client: Client, task_queue: str, tmp_path: Path, scripted_worker: WorkerFactory,
) -> None:
    """The library's own iterator: a run that never started raises NeverStarted, with the
    reason."""
    run = await start_unopenable(client, "account", task_queue)
    async with scripted_worker(await guarded_worker_client(client, tmp_path)):
        with pytest.raises(NeverStarted) as raised:
            [s async for s in follow(client.get_workflow_handle(run), poll_seconds=0.1)]
    assert raised.value.run == run
    assert raised.value.reason.startswith("the input could not be opened: ")


async def test_a_closed_run_is_replayed_here_not_asked_of_a_worker(
    client: Client, task_queue: str, tmp_path: Path, scripted_worker: WorkerFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Following a closed run with the project's agents replays its history in the follower:
    asking a worker instead waited out the query's timeout (~30 s) once the worker had
    stopped, because the server still lists a stopped worker as polling for a while."""
    run = await start_unopenable(client, "account", task_queue)
    handle = client.get_workflow_handle(run)
    async with scripted_worker(await guarded_worker_client(client, tmp_path)):
        with contextlib.suppress(WorkflowFailureError):
            await handle.result()
    asked: list[object] = []

    async def no_query(self: WorkflowHandle[Any, Any], query: object, *args: Any,
                       **kwargs: Any) -> None:
        asked.append(query)
        raise AssertionError("a closed run's follower asked a worker")

    monkeypatch.setattr(WorkflowHandle, "query", no_query)
    with pytest.raises(NeverStarted):  # its end, read from the server alone
        [s async for s in follow(handle, poll_seconds=0.1, workflows=[AccountAgent])]
    assert asked == []

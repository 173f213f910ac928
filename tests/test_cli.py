"""The real `tower` command, run as a user would, against the real dev server."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import IO

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from towercli import TOWER, tower_cli, until_connected

from tower.activities.model import ModelSettings
from tower.cli.devserver import free_port, port_free, temporal_binary
from worker import build_worker


def cli_env(address: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TEMPORAL_"))}
    return {**env, "TEMPORAL_ADDRESS": address}


async def tower(address: str, *args: str, timeout: float = 60) -> tuple[int, str, str]:
    """`tower ARGS` in its own process, forked from the CLI fork server (see towercli)."""
    return await tower_cli(list(args), env=cli_env(address), timeout=timeout)


async def installed_tower(address: str, *args: str) -> tuple[int, str, str]:
    """The installed `tower` script itself, interpreter start-up and all."""
    proc = await asyncio.create_subprocess_exec(
        TOWER, *args, env=cli_env(address), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


def address_of(env: WorkflowEnvironment) -> str:
    return env.client.service_client.config.target_host


async def test_help_lists_every_command(env: WorkflowEnvironment) -> None:
    code, out, _ = await installed_tower(address_of(env), "--help")
    assert code == 0
    for command in ("dev", "demo", "run", "state", "list", "graph"):
        assert f"\n  {command} " in out
    code, out, _ = await tower(address_of(env), "run", "--help")
    assert code == 0 and "--input" in out and "account" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "nope", "--input", "{}"], "unknown agent 'nope'; known agents: account"),
        (["graph", "nope"], "unknown agent 'nope'"),
        (["run", "account", "--input", "{not json"], "--input is not valid JSON"),
        (["run", "account", "--input", "{}"], "field question: Field required"),
        (["run", "account", "--input", '{"question": ""}'],
         "field question: String should have at least 1 character"),
        (["list", "--status", "x' OR 1=1"], "invalid filter value"),
        (["state", "no-such-run"], "run 'no-such-run' not found"),
        # Fields an agent's input model has that only the run itself (continue-as-new) or
        # the deployment sets: refused before anything starts.
        (["run", "refund", "--input",
          '{"message": "refund $5 on INV-2001", "carry": {"state": {}, "log": {}}}'],
         "input for 'refund' may not set field carry"),
        (["run", "support", "--input", '{"message": "hi", "carry": null}'],
         "input for 'support' may not set field carry"),
        (["run", "migration", "--input",
          '{"database": "shop", "script": "x", "approvals": {"allow_unsigned": true}}'],
         "input for 'migration' may not set field approvals"),
        (["run", "account", "--input", '{"question": "hi", "approvals": null}'],
         "input for 'account' may not set field approvals"),
    ],
)
async def test_bad_input_gets_a_clear_error_and_exit_2(
    env: WorkflowEnvironment, args: list[str], message: str
) -> None:
    code, out, err = await tower(address_of(env), *args)
    assert code == 2, (out, err)
    assert message in err and err.startswith("error: ")
    assert err.count("\n") == 1, err  # one line, no traceback


async def test_unwritable_paths_get_one_line_and_exit_2(
    env: WorkflowEnvironment, tmp_path: Path, task_queue: str
) -> None:
    address, run_id = address_of(env), f"export-{task_queue}"
    code, _, err = await tower(address, "run", "support", "--input", '{"message": "hi"}',
                               "--id", run_id, "--task-queue", task_queue, "--no-follow")
    assert code == 0, err
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    # Root may write anywhere: a path under a plain file cannot be made by anyone.
    for target in (f"{a_file}/histories/", f"{a_file}/{run_id}.json", "/proc/tower/"):
        code, out, err = await tower(address, "history", "export", run_id, "-o", target)
        assert code == 2, (target, out, err)
        assert err.startswith("error: cannot write the history to ") and err.count("\n") == 1

    # A trust directory that cannot be made: `tower dev` says so before starting a server,
    # `tower keys enrol` instead of writing the roster.
    trust = {**cli_env(address), "TOWER_TRUST_DIR": f"{a_file}/trust",
             "TOWER_CONFIG_DIR": str(tmp_path / "config")}
    port = free_port()
    for args in (["dev", "--port", str(port), "--headless", "--db", str(tmp_path / "t.sqlite")],
                 ["keys", "enrol", "alice", "--role", "manager"]):
        code, out, err = await tower_cli(args, env=trust, cwd=tmp_path)
        assert code == 2, (args, out, err)
        assert err.startswith(f"error: cannot write {a_file}/trust/default/") and \
            "in the trust directory (TOWER_TRUST_DIR)" in err and err.count("\n") == 1, err
    assert port_free(port)  # no server was started


async def test_unreachable_server_says_how_to_start_one() -> None:
    code, _, err = await tower(f"127.0.0.1:{free_port()}", "list")
    assert code == 2
    assert "no Temporal server answers at 127.0.0.1:" in err and "tower dev" in err


async def test_run_follows_transitions_then_state_and_list_find_it(
    env: WorkflowEnvironment, task_queue: str, db_path: Path
) -> None:
    address, run_id = address_of(env), f"cli-{task_queue}"
    async with build_worker(env.client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings()):
        code, out, err = await tower(
            address, "run", "account", "--input", '{"question": "Check ACC-1003"}',
            "--id", run_id, "--task-queue", task_queue)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"started {run_id}"
    assert "START → reason" in lines[1] and "reason → lookup_account" in lines[2]
    assert "[model:scripted]" in lines[2] and "[tool:lookup_account]" in lines[3]
    assert "reason → DONE" in lines[4]
    assert "status: DONE" in out and "Alan Turing" in out
    assert f"/namespaces/default/workflows/{run_id}" in out

    code, out, _ = await tower(address, "state", run_id)
    state = json.loads(out)
    assert code == 0 and state["status"] == "DONE" and state["step"] == 4

    await _eventually_listed(address, run_id)
    code, out, _ = await tower(address, "list", "--agent", "account", "--status", "DONE")
    assert code == 0 and run_id in out
    # The search attributes work with Temporal's own tooling, too (a DONE run is a
    # completed execution: docs/operations.md).
    listed = subprocess.run(
        [temporal_binary(), "workflow", "list", "--address", address, "--query",
         f"ExecutionStatus='Completed' AND AgentName='account' AND WorkflowId='{run_id}'"],
        capture_output=True, text=True, timeout=30)
    assert run_id in listed.stdout


async def test_run_without_a_worker_warns_and_no_follow_returns(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    code, out, err = await tower(address_of(env), "run", "support", "--input",
                                 '{"message": "hello"}', "--task-queue", task_queue,
                                 "--no-follow")
    assert code == 0 and out.startswith("started support-") and err == ""
    proc = await asyncio.create_subprocess_exec(
        TOWER, "run", "support", "--input", '{"message": "hello"}', "--task-queue", task_queue,
        env=cli_env(address_of(env)), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    line = await asyncio.wait_for(proc.stderr.readline(), 30)
    proc.kill()
    await proc.wait()
    assert f"no worker is polling task queue {task_queue!r}" in line.decode()


async def _eventually_listed(address: str, run_id: str) -> None:
    # Visibility is eventually consistent: give the index a moment.
    for _ in range(40):
        code, out, _ = await tower(address, "list", "--status", "DONE", "--limit", "100")
        if run_id in out:
            return
        await asyncio.sleep(0.25)
    raise AssertionError(f"{run_id} never appeared in `tower list`")


async def test_graph_prints_the_mermaid_machine(env: WorkflowEnvironment) -> None:
    code, out, _ = await tower(address_of(env), "graph", "support")
    assert code == 0 and out.startswith("stateDiagram-v2\n")
    assert "classify --> billing: BILLING" in out


async def test_dev_server_registers_attributes_and_keeps_runs_across_restarts(
    tmp_path: Path,
) -> None:
    port, ui_port, db = free_port(), free_port(), tmp_path / "dev.sqlite"
    metrics_port = free_port()
    address = f"127.0.0.1:{port}"
    args = [TOWER, "dev", "--port", str(port), "--ui-port", str(ui_port), "--db", str(db),
            "--metrics-port", str(metrics_port)]  # pinned: a scraper can be told it

    async def serve() -> tuple[subprocess.Popen[bytes], Client]:
        proc = subprocess.Popen(args, env=cli_env(address), stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL)
        assert proc.stdout is not None
        # It prints how to connect once the server is up and set up (`tower setup`).
        out = await asyncio.wait_for(asyncio.to_thread(_until_line, proc.stdout,
                                                       "Workers and commands connect"), 120)
        assert "Temporal dev server on" in out
        return proc, await Client.connect(address)

    proc, client = await serve()
    try:
        from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
        attrs = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace="default"))
        assert {"AgentName", "AgentNode", "AgentStatus", "AgentStep"} <= set(
            attrs.custom_attributes)
        import httpx
        async with httpx.AsyncClient() as http:
            metrics = await http.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10)
        assert metrics.status_code == 200 and "# TYPE" in metrics.text
        handle = await client.start_workflow("account", {"question": "x"}, id="survivor",
                                             task_queue="nobody-polls")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    proc, client = await serve()
    try:
        info = await client.get_workflow_handle(handle.id).describe()
        assert info.id == "survivor", "the run outlived the server restart"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _until_line(stream: IO[bytes], needle: str) -> str:
    seen = ""
    for line in iter(stream.readline, b""):
        seen += line.decode()
        if needle in seen:
            return seen
    raise AssertionError(f"never printed {needle!r}; printed:\n{seen}")


@pytest.mark.parametrize("command", ["run", "watch"])
async def test_ctrl_c_while_following_a_run_exits_130_without_a_traceback(
    env: WorkflowEnvironment, task_queue: str, command: str
) -> None:
    address, run_id = address_of(env), f"ctrl-c-{task_queue}"
    start = ["run", "support", "--input", '{"message": "hi"}', "--id", run_id,
             "--task-queue", task_queue]  # no worker polls it: the run never moves
    if command == "watch":
        code, _, err = await tower(address, *start, "--no-follow")
        assert code == 0, err
    args = start if command == "run" else ["watch", run_id]
    proc = await asyncio.create_subprocess_exec(
        TOWER, *args, env=cli_env(address), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as at a terminal
    assert proc.stdout is not None
    async with asyncio.timeout(60):
        if command == "run":
            assert (await proc.stdout.readline()).decode() == f"started {run_id}\n"
        else:  # following: connected to the server
            await until_connected(proc.pid, int(address.rpartition(":")[2]))
        proc.send_signal(signal.SIGINT)
        printed, complained = await proc.communicate()
    assert proc.returncode == 130, (printed, complained)
    assert b"Traceback" not in printed + complained, complained.decode()


async def test_enrolling_a_member_again_changes_its_roles_and_says_so(tmp_path: Path) -> None:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("TOWER_")},
           "TOWER_TRUST_DIR": str(tmp_path / "trust"),
           "TOWER_CONFIG_DIR": str(tmp_path / "config")}

    async def enrol(*roles: str) -> tuple[str, list[str]]:
        args = ["keys", "enrol", "alice", *[a for r in roles for a in ("--role", r)]]
        code, out, err = await tower_cli(args, env=env, cwd=tmp_path)
        assert code == 0, err
        roster = json.loads((tmp_path / "trust" / "default" / "roster.json").read_text())
        (alice,) = [m for m in roster["members"] if m["name"] == "alice"]
        return out, alice["roles"]

    assert (await enrol("manager"))[1] == ["manager"]
    out, roles = await enrol("manager", "dba")
    assert roles == ["dba", "manager"] and "alice's roles changed: manager -> dba, manager" in out
    out, roles = await enrol()  # no role given: the member keeps its roles
    assert roles == ["dba", "manager"] and "changed" not in out
    out, roles = await enrol("dba")
    assert roles == ["dba"] and "alice's roles changed: dba, manager -> dba" in out

"""Live CLI views and `--json` on every command, run as a user would on the real dev server."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click
import pytest
from temporalio.testing import WorkflowEnvironment
from test_cli import TOWER, address_of, cli_env, tower
from towercli import tower_cli, until_connected

from tower.activities.model import ModelSettings
from tower.cli.cli import COMMANDS, cli
from tower.cli.devserver import free_port
from tower.cli.live import Progress, format_elapsed
from worker import build_worker


def json_lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_progress_line_and_elapsed_are_readable() -> None:
    start = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
    progress = Progress(run="account-1", step=3, node="reason", status="RUNNING", started=start)
    assert progress.line(start + timedelta(seconds=4.25)) == \
        "[account-1] step 3 · reason · RUNNING · 00:04.2"
    assert format_elapsed(3725.5) == "1:02:05.5"
    assert format_elapsed(-1) == "00:00.0"


def test_every_command_takes_json() -> None:
    def leaves(command: click.Command, path: str) -> list[tuple[str, click.Command]]:
        if not isinstance(command, click.Group):
            return [(path, command)]
        ctx = click.Context(command)
        subs = {name: command.get_command(ctx, name) for name in command.list_commands(ctx)}
        return [leaf for name, sub in subs.items() if sub is not None
                for leaf in leaves(sub, f"{path} {name}")]

    found = leaves(cli, "tower")
    # `history` is a group of one action (export); `keys` of three (new, enrol, worker).
    assert len(found) == len(COMMANDS) + 2
    for name, command in found:
        assert any("--json" in p.opts for p in command.params), name


async def test_run_and_watch_stream_json_lines(
    env: WorkflowEnvironment, task_queue: str, db_path: Path
) -> None:
    address, run_id = address_of(env), f"live-{task_queue}"
    async with build_worker(env.client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings()):
        code, out, err = await tower(
            address, "run", "account", "--input", '{"question": "Check ACC-1001"}',
            "--id", run_id, "--task-queue", task_queue, "--json")
        assert code == 0, err
        events = json_lines(out)
        assert events[0]["event"] == "started" and events[0]["run"] == run_id
        moves = [(e["source"], e["target"]) for e in events if e["event"] == "transition"]
        assert moves == [("START", "reason"), ("reason", "lookup_account"),
                         ("lookup_account", "reason"), ("reason", "DONE")]
        end = events[-1]
        assert end["event"] == "end" and end["status"] == "DONE" and end["step"] == 4
        assert end["state"]["answer"]

        # watch on a finished run replays its whole log, then ends.
        code, out, err = await tower(address, "watch", run_id, "--json")
        assert code == 0, err
        watched = json_lines(out)
        assert [e["step"] for e in watched[:-1]] == [1, 2, 3, 4]
        assert watched[-1] == {"event": "end", "run": run_id, "status": "DONE", "step": 4,
                               "node": "DONE"}
        code, out, _ = await tower(address, "watch", run_id)
        assert code == 0
        assert "reason → lookup_account" in out
        assert out.splitlines()[-1].startswith(f"[{run_id}] step 4 · DONE · DONE · ")


async def test_watch_follows_a_run_live_and_stops_at_its_gate(
    env: WorkflowEnvironment, task_queue: str, db_path: Path
) -> None:
    """`tower watch` started before the worker: it shows each move as it happens."""
    address, run_id = address_of(env), f"gate-{task_queue}"
    secret: dict[str, str] = {}
    code, out, err = await tower_env(
        address, secret, "run", "refund", "--input",
        '{"message": "Please refund $1,200 on invoice INV-2004"}', "--id", run_id,
        "--task-queue", task_queue, "--no-follow", "--json")
    assert code == 0, err
    assert json.loads(out) == {"event": "started", "run": run_id, "agent": "refund",
                               "task_queue": task_queue, "web_ui": json.loads(out)["web_ui"]}
    watcher = await asyncio.create_subprocess_exec(
        TOWER, "watch", run_id, "--until-pause", "--json", "--timeout", "60",
        env=cli_env(address), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # The watcher is talking to the server about a run no worker has touched yet.
    await until_connected(watcher.pid, int(address.rsplit(":", 1)[1]))
    async with build_worker(env.client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings()):
        out_b, err_b = await asyncio.wait_for(watcher.communicate(), 60)
        handle = env.client.get_workflow_handle(run_id)
        await handle.terminate("test over")
    assert watcher.returncode == 0, err_b.decode()
    events = json_lines(out_b.decode())
    assert events[-1]["status"] == "AWAITING_APPROVAL" and events[-1]["node"] == "issue_refund"
    assert [e["step"] for e in events[:-1]] == list(range(1, len(events)))


async def test_other_commands_print_json(
    env: WorkflowEnvironment, task_queue: str, db_path: Path, tmp_path: Path
) -> None:
    address, run_id = address_of(env), f"json-{task_queue}"
    async with build_worker(env.client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings()):
        code, _, err = await tower(address, "run", "account", "--input",
                                   '{"question": "Check ACC-1002"}', "--id", run_id,
                                   "--task-queue", task_queue)
        assert code == 0, err
        for args in (["state", run_id], ["list", "--limit", "5"], ["pending"],
                     ["cost", run_id], ["inspect", run_id], ["graph", "account"],
                     ["history", "export", run_id, "--output", str(tmp_path / "h.json")],
                     ["replay", str(tmp_path / "h.json")]):
            code, out, err = await tower(address, *args, "--json", timeout=120)
            assert code == 0, (args, err)
            json.loads(out)  # one JSON document, nothing else on stdout
    # Errors too: a script gets JSON and exit code 2.
    code, out, err = await tower(address, "state", "no-such-run", "--json")
    assert code == 2 and "not found" in json.loads(out)["error"] and err.startswith("error:")
    code, out, _ = await tower(address, "inspect", "no-such-run", "--json")
    assert code == 2 and json.loads(out)["exit_code"] == 2


async def test_dev_writes_only_in_its_project_and_links_find_its_ui_from_anywhere(
    tmp_path: Path,
) -> None:
    """`tower dev --json`, with a home of its own and no Tower variables, names the server it
    starts and its UI, and nothing lands outside its project's .tower/. A command run from
    another folder, with a TOWER_CONFIG_DIR of its own, links to that server's UI port (the
    server says it), not to :8233."""
    project, home, elsewhere = tmp_path / "project", tmp_path / "home", tmp_path / "elsewhere"
    for folder in (project, home, elsewhere):
        folder.mkdir()
    bare = {k: v for k, v in os.environ.items()
            if not k.startswith(("TOWER_", "TEMPORAL_", "XDG_", "OPENAI_"))}
    port, ui_port = free_port(), free_port()
    proc = await asyncio.create_subprocess_exec(
        TOWER, "dev", "--port", str(port), "--ui-port", str(ui_port), "--json", cwd=project,
        env={**bare, "HOME": str(home)}, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        start_new_session=True)
    try:
        assert proc.stdout is not None
        info = json.loads(await asyncio.wait_for(proc.stdout.readline(), 60))
        assert info["address"] == f"127.0.0.1:{port}"
        assert info["web_ui"] == f"http://localhost:{ui_port}"
        code, out, err = await tower_cli(
            ["--project", str(Path(__file__).resolve().parent.parent), "run", "support",
             "--input", '{"message": "hi"}', "--id", "linked", "--no-follow",
             "--json"], cwd=elsewhere,
            env={**bare, "HOME": str(tmp_path), "TEMPORAL_ADDRESS": info["address"],
                 "TOWER_CONFIG_DIR": str(tmp_path / "config")})
        assert code == 0, err
        assert json.loads(out)["web_ui"] == \
            f"http://localhost:{ui_port}/namespaces/default/workflows/linked"
    finally:
        proc.terminate()
        await proc.wait()
    assert list(home.rglob("*")) == []
    assert {p.relative_to(project).parts[0] for p in project.rglob("*")} == {".tower"}


async def test_the_server_says_where_its_ui_is(
    env: WorkflowEnvironment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `tower dev` records in each namespace it sets up: its UI, or none (headless)."""
    from temporalio.client import Client

    from tower.cli.devserver import prepare
    from tower.cli.ui import ui_base

    monkeypatch.delenv("TOWER_UI_URL", raising=False)
    namespace = f"ui-{uuid.uuid4().hex[:8]}"  # a namespace of its own: the session's stay
    client = await Client.connect(address_of(env), namespace=namespace)
    await prepare(client, ui="http://localhost:9400")
    assert await ui_base(client) == "http://localhost:9400"
    await prepare(client, ui=None)  # restarted headless
    assert await ui_base(client) is None
    monkeypatch.setenv("TOWER_UI_URL", "https://temporal.example.com/")
    assert await ui_base(client) == "https://temporal.example.com"


@pytest.mark.parametrize("fmt", ["mermaid", "svg"])
async def test_graph_text_formats(env: WorkflowEnvironment, fmt: str) -> None:
    code, out, _ = await tower(address_of(env), "graph", "refund", "--format", fmt)
    assert code == 0 and "refund_review" in out and "manager" in out


async def tower_env(address: str, extra: dict[str, str], *args: str) -> tuple[int, str, str]:
    return await tower_cli(list(args), env={**cli_env(address), **extra})

"""`tower new NAME`: the project it writes (every placeholder filled, ruff-clean, its
in-process tests passing as generated), and what it refuses with one line and exit 2,
writing nothing. The project's whole pytest (its live run and replay too) and `tower graph`
in it are run by tests/test_guide.py (the soak tier), which follows the page that starts
here."""

from __future__ import annotations

import asyncio
import io
import json
import os
import socket
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest
from towercli import tower_cli

BIN = Path(sys.executable).parent
FILES = {
    "pyproject.toml", "README.md", ".gitignore", "worker.py", "workflows/__init__.py",
    "workflows/shop_ops.py", "activities/__init__.py", "activities/payments.py",
    "tests/test_shop_ops.py", "tests/test_payments.py", "tests/test_live.py",
    "tests/test_replay.py",
}


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("TOWER_", "TEMPORAL_"))}


def strings(source: str) -> list[str]:
    """The string literals (docstrings and f-strings' text included) of Python source."""
    return [t.string for t in tokenize.generate_tokens(io.StringIO(source).readline)
            if t.type == tokenize.STRING or t.type == getattr(tokenize, "FSTRING_MIDDLE", -1)]


def written(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


async def test_new_writes_a_project_named_after_its_agent(tmp_path: Path) -> None:
    code, out, err = await tower_cli(["new", "shop_ops"], env=clean_env(), cwd=tmp_path)
    assert code == 0, err
    project = tmp_path / "shop_ops"
    assert written(project) == FILES
    assert "cd shop_ops && pytest" in out
    agent = (project / "workflows" / "shop_ops.py").read_text()
    assert 'Graph("shop_ops", ShopOpsState' in agent and "class ShopOpsAgent(" in agent
    # No Temporal plumbing: admission and carried state are the runtime's.
    assert not any(word in agent for word in ("admit", "take_carried", "carry", "workflow.init"))
    # An agent is its graph, its input and its start: nothing of Temporal in its file.
    assert "temporalio" not in agent and "@workflow" not in agent, agent
    # Its own task queue, named after it: the `tower` command's default in the project, and
    # the worker's, so two projects on one server never share one.
    assert 'task-queue = "shop_ops"' in (project / "pyproject.toml").read_text()
    assert '"TOWER_TASK_QUEUE", "shop_ops"' in (project / "worker.py").read_text()
    for name in FILES:
        assert "{{" not in (project / name).read_text(), name
    # A tool is one object: the business function under @tool; exactly-once is Tower's.
    tool = (project / "activities" / "payments.py").read_text()
    assert len(tool.splitlines()) <= 40 and "@tool(side_effect=True)" in tool, tool
    assert "def send_payment(" in tool
    # Its name is written once, where it is defined: every other file reaches the object
    # (an import), and no string anywhere spells the name.
    spelled = {n: s for n in FILES if n.endswith(".py")
               for s in strings((project / n).read_text()) if "send_payment" in s}
    assert spelled == {}, spelled
    # The worker lists no activities: the tools come from the agents' graphs, bound once.
    worker = (project / "worker.py").read_text()
    assert "activities=" not in worker and "bind=" in worker, worker
    assert "Authority" not in agent and "ctx.decision" not in agent  # no node builds one
    # The gated agent, the effect tool, the worker and the tests: small enough to read.
    sizes = {n: len((project / n).read_text().splitlines()) for n in FILES if n.endswith(".py")}
    assert sum(sizes.values()) <= 388, sizes
    # The code it writes passes the linter under its own settings (its pyproject.toml).
    lint = subprocess.run([str(BIN / "ruff"), "check", "--select", "E,F,I,B,UP,SIM", "."],
                          cwd=project, capture_output=True, text=True, timeout=120)
    assert lint.returncode == 0, lint.stdout + lint.stderr


async def test_the_new_projects_in_process_tests_pass_as_generated(tmp_path: Path) -> None:
    """Its agent's tests (the in-process runner, gates included) and its tool's, run by plain
    pytest in the project with a user's environment: no TOWER_* settings, an empty home."""
    home = tmp_path / "home"
    home.mkdir()
    code, _, err = await tower_cli(["new", "shop_ops"], env=clean_env(), cwd=tmp_path)
    assert code == 0, err
    shell = {k: v for k, v in clean_env().items() if not k.startswith(("OPENAI_", "PYTHON"))}
    ran = await asyncio.to_thread(
        subprocess.run, [str(BIN / "pytest"), "-q", "-p", "no:cacheprovider",
                         "tests/test_shop_ops.py", "tests/test_payments.py"],
        cwd=tmp_path / "shop_ops", env={**shell, "HOME": str(home)}, capture_output=True,
        text=True, timeout=300)
    assert ran.returncode == 0 and "9 passed" in ran.stdout, ran.stdout[-3000:] + ran.stderr


async def test_new_takes_an_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "payouts").mkdir()
    code, out, err = await tower_cli(["new", "payouts", "--json"], env=clean_env(),
                                     cwd=tmp_path)
    assert code == 0, err
    made = json.loads(out)
    assert made["project"] == str(tmp_path / "payouts") and made["agent"] == "payouts"
    assert set(made["files"]) == written(tmp_path / "payouts")


@pytest.mark.parametrize(("name", "problem"), [
    ("9lives", "bad project name '9lives': use a Python identifier"),
    ("my-shop", "bad project name 'my-shop': use a Python identifier"),
    ("class", "bad project name 'class': use a Python identifier"),
    ("tower", "bad project name 'tower': it would clash"),
    ("workflows", "bad project name 'workflows': it would clash"),
    ("test_shop", "bad project name 'test_shop': it would clash"),
])
async def test_new_refuses_a_bad_name_in_one_line(tmp_path: Path, name: str,
                                                  problem: str) -> None:
    code, out, err = await tower_cli(["new", name], env=clean_env(), cwd=tmp_path)
    assert code == 2 and out == ""
    assert err.startswith(f"error: {problem}") and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []  # nothing written


async def test_new_refuses_a_folder_that_is_not_empty(tmp_path: Path) -> None:
    mine = tmp_path / "payouts"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    (tmp_path / "plain").write_text("a file")
    for name in ("payouts", "plain"):
        code, out, err = await tower_cli(["new", name], env=clean_env(), cwd=tmp_path)
        assert code == 2 and out == ""
        assert err == (f"error: {tmp_path / name} already exists and is not empty: nothing "
                       "was written (pick another NAME, or remove it)\n")
    assert written(mine) == {"notes.txt"} and (mine / "notes.txt").read_text() == "mine"
    assert (tmp_path / "plain").read_text() == "a file"


REPLAYER = """
import asyncio, sys
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import History
from temporalio.client import WorkflowHistory
from temporalio.converter import DataConverter
from temporalio.worker import Replayer
from workflows.shop_ops import ShopOpsAgent

h = History()  # a run's history up to its first workflow task: the agent loads and runs
a = h.events.add(event_id=1, event_type=EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED
                 ).workflow_execution_started_event_attributes
a.workflow_type.name = a.task_queue.name = "shop_ops"
a.input.payloads.extend(DataConverter.default.payload_converter.to_payloads(
    [{"message": "Pay $250 to ACME for invoice 42"}]))
a.original_execution_run_id = a.first_execution_run_id = "run-1"
a.workflow_task_timeout.seconds = 10
h.events.add(event_id=2, event_type=EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED
             ).workflow_task_scheduled_event_attributes.start_to_close_timeout.seconds = 10
h.events.add(event_id=3, event_type=EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED
             ).workflow_task_started_event_attributes.scheduled_event_id = 2
for event in h.events:
    event.event_time.seconds = 1_800_000_000
plugins = []
if sys.argv[1:] == ["--plugin"]:
    from tower.temporal import TowerPlugin
    plugins = [TowerPlugin()]
replayer = Replayer(workflows=[ShopOpsAgent], plugins=plugins)
asyncio.run(replayer.replay_workflow(WorkflowHistory("shop_ops-1", list(h.events))))
print("replayed")
"""


async def test_the_worker_says_plainly_that_no_server_answers(tmp_path: Path) -> None:
    code, _, err = await tower_cli(["new", "shop_ops"], env=clean_env(), cwd=tmp_path)
    assert code == 0, err
    with socket.socket() as s:  # a port no server listens on
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    ran = await asyncio.to_thread(
        subprocess.run, [sys.executable, "worker.py"], cwd=tmp_path / "shop_ops",
        env={**clean_env(), "TEMPORAL_ADDRESS": address}, capture_output=True, text=True,
        timeout=120)
    assert ran.returncode == 1 and ran.stdout == "", ran.stdout + ran.stderr
    assert ran.stderr.startswith(f"error: no Temporal server answers at {address}"), ran.stderr
    assert "Traceback" not in ran.stderr


async def test_a_replayer_as_temporal_s_docs_write_it(tmp_path: Path) -> None:
    """``Replayer(workflows=[Agent])`` in a new project, as Temporal's docs teach: without
    TowerPlugin it fails, its last line naming TowerPlugin (not a sandbox error about
    joserfc, nor a converter's); with it, the run replays."""
    code, _, err = await tower_cli(["new", "shop_ops"], env=clean_env(), cwd=tmp_path)
    assert code == 0, err
    env = {**clean_env(), "PYTHONPATH": str(tmp_path / "shop_ops")}
    plain, with_plugin = (await asyncio.gather(*(asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", REPLAYER, *args], cwd=tmp_path / "shop_ops",
        env=env, capture_output=True, text=True, timeout=120) for args in ([], ["--plugin"]))))
    assert plain.returncode != 0 and "replayed" not in plain.stdout
    last = plain.stderr.strip().splitlines()[-1]
    assert last.startswith("tower.NeedsTowerPlugin: Tower agents need TowerPlugin"), last
    assert "Replayer(workflows=[...], plugins=[TowerPlugin()])" in last
    assert with_plugin.returncode == 0 and with_plugin.stdout == "replayed\n", (
        with_plugin.stdout + with_plugin.stderr)

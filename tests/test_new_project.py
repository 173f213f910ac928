"""`tower new NAME`: the project it writes (every placeholder filled, ruff-clean, the figures
issue 41 asks of it), a live run through its worker and `tower eval` on it in a clean folder
outside this repository, and what it refuses with one line and exit 2, writing nothing.
docs/write-your-own-agent.md shows the same files, and tests/test_guide.py runs their own
tests as generated in a clean folder (the live run through its worker included)."""

from __future__ import annotations

import ast
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

from tower.testing import live

pytestmark = pytest.mark.long  # a live run: collected first, so that xdist starts it early

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[1]
FILES = {
    "pyproject.toml", "README.md", ".gitignore", "worker.py", "workflows/__init__.py",
    "workflows/shop_ops.py", "activities/__init__.py", "activities/payments.py",
    "tests/test_shop_ops.py",
}
MAX_LINES = 250  # the project's Python, tests included (issue 41; 379 before)


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("TOWER_", "TEMPORAL_"))}


def python_files(project: Path) -> dict[str, str]:
    return {p.relative_to(project).as_posix(): p.read_text() for p in project.rglob("*.py")}


def mentions(source: str, name: str) -> list[tuple[str, int]]:
    """Each token of ``source`` that contains ``name``: (its kind, its line)."""
    return [(tokenize.tok_name[t.type], t.start[0])
            for t in tokenize.generate_tokens(io.StringIO(source).readline) if name in t.string]


def imported(source: str) -> set[str]:
    """The top-level packages ``source`` imports."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


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
    # Its own task queue, named after it: the `tower` command's default in the project, and
    # the worker's, so two projects on one server never share one.
    assert 'task-queue = "shop_ops"' in (project / "pyproject.toml").read_text()
    assert '"TOWER_TASK_QUEUE", "shop_ops"' in (project / "worker.py").read_text()
    for name in FILES:
        assert "{{" not in (project / name).read_text(), name
    # The code it writes passes the linter under its own settings (its pyproject.toml).
    lint = subprocess.run([str(BIN / "ruff"), "check", "--select", "E,F,I,B,UP,SIM", "."],
                          cwd=project, capture_output=True, text=True, timeout=120)
    assert lint.returncode == 0, lint.stdout + lint.stderr


async def test_the_new_project_has_the_figures_of_issue_41(tmp_path: Path) -> None:
    code, _, err = await tower_cli(["new", "shop_ops"], env=clean_env(), cwd=tmp_path)
    assert code == 0, err
    sources = python_files(tmp_path / "shop_ops")
    assert set(sources) == {n for n in FILES if n.endswith(".py")}
    # Its Python, tests included, in at most 250 lines.
    lines = {name: len(text.splitlines()) for name, text in sources.items()}
    assert sum(lines.values()) <= MAX_LINES, lines
    # The tool's name is written once, where the tool is defined (`def send_payment`, under
    # @tool(side_effect=True)); everywhere else the code names the object (an import, a
    # reference Python checks), never a string or a comment that spells it.
    found = {name: mentions(text, "send_payment") for name, text in sources.items()}
    kinds = {kind for tokens in found.values() for kind, _ in tokens}
    assert kinds == {"NAME"}, found
    tool = sources["activities/payments.py"].splitlines()
    defined = [n for n, line in enumerate(tool, 1) if "send_payment" in line]
    assert len(defined) == 1 and tool[defined[0] - 1].startswith("def send_payment(")
    assert tool[defined[0] - 2].startswith("@tool(side_effect=True)")
    # The agent file imports nothing from temporalio, and has no Temporal decorator.
    agent = sources["workflows/shop_ops.py"]
    assert "temporalio" not in imported(agent) and "@workflow" not in agent, agent
    assert "Authority" not in agent and "ctx.decision" not in agent  # no node builds one
    # worker.py lists no activities: the plugin serves the tools the agents' graphs use,
    # their resources bound once (bind=).
    worker = ast.parse(sources["worker.py"])
    keywords = {k.arg for node in ast.walk(worker) if isinstance(node, ast.Call)
                for k in node.keywords}
    assert "activities" not in keywords and "bind" in keywords, sources["worker.py"]
    assert "activities=" not in sources["worker.py"]


@pytest.mark.skipif(not live.available(), reason=live.MISSING)
async def test_tower_eval_runs_in_the_new_project_as_generated(tmp_path: Path) -> None:
    """docs/evals.md followed in a project as `tower new` writes it, outside this repository,
    with an empty home and no TOWER_* settings: a run made through its worker, `tower run`
    and `tower approve`, its history exported, then `tower eval` on it is `same`; with the
    agent's prompt changed, the eval names the change. The real payments stay as they were."""
    assert REPO not in tmp_path.parents
    home, server = tmp_path / "home", tmp_path / "server"
    home.mkdir()
    server.mkdir()
    code, _, err = await tower_cli(["new", "shop_ops"], env=clean_env(), cwd=tmp_path)
    assert code == 0, err
    project = tmp_path / "shop_ops"
    shell = live.Shell(project, server)
    shell.env = {**clean_env(), "HOME": str(home)}  # a user's shell: no Tower settings
    async with shell:
        await shell.tower("keys", "enrol", "alice", "--role", "approver")
        async with shell.worker():
            ran = await shell.tower("run", "shop_ops", "--id", "pay-1", "--input",
                                    '{"message": "Pay $250 to ACME"}')
            assert "status: AWAITING_APPROVAL" in ran, ran
            approved = await shell.tower("approve", "--yes", "pay-1", "--by", "alice")
            assert "status: DONE" in approved and "Paid ACME $250.00" in approved, approved
        (project / "tests" / "histories").mkdir()
        await shell.tower("history", "export", "pay-1", "-o", "tests/histories/")
    payments = project / ".tower" / "tools.sqlite"  # what the worker paid, for real
    paid = payments.read_bytes()

    same = await shell.tower("eval", "tests/histories/")
    assert "1 runs: 1 same, 0 changed, 0 regressed" in same, same
    agent = project / "workflows" / "shop_ops.py"
    prompt = 'prompt="Read the payment this request asks for."'
    assert prompt in agent.read_text()
    agent.write_text(agent.read_text().replace(prompt, 'prompt="Read the payee and amount."'))
    changed = await shell.tower("eval", "tests/histories/")
    assert "1 runs: 0 same, 1 changed, 0 regressed" in changed, changed
    assert "prompt of node plan changed" in changed, changed
    assert payments.read_bytes() == paid  # the eval paid on data of its own


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

"""docs/write-your-own-agent.md, followed literally: its files are written into a scratch
project outside this repository (its own ``workflows/`` package), and its commands are run
there — the in-process tests, the project's worker built with Tower's builder, the ``tower``
CLI finding the project's agent, the history export and the replay helper."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment
from test_cli import TOWER, address_of, cli_env

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "write-your-own-agent.md"
REPO = GUIDE.parents[1]
FILE_BLOCK = re.compile(r"^```\w+ (\S+)\n(.*?)^```$", re.M | re.S)
# The guide's commands, in its order; the test runs exactly these (the worker in the
# background, the task queue renamed so parallel runs never share one).
COMMANDS = [
    "python -m pytest -q tests",
    "python worker.py &",
    "tower run triage --input '{\"ticket\": \"Where is ORD-7?\"}' --id triage-1 "
    "--task-queue triage",
    "mkdir -p tests/histories && tower history export triage-1 -o tests/histories/",
    "tower replay tests/histories/",
    "python -m pytest -q tests",
]


def guide_files() -> dict[str, str]:
    return {path: body for path, body in FILE_BLOCK.findall(GUIDE.read_text())}


def guide_commands() -> list[str]:
    blocks = re.findall(r"^```console\n(.*?)^```$", GUIDE.read_text(), re.M | re.S)
    return [line[2:] for block in blocks for line in block.splitlines() if line.startswith("$ ")]


def test_the_guide_lists_the_files_and_commands_this_test_follows() -> None:
    assert set(guide_files()) == {"workflows/triage.py", "tests/test_triage.py", "pytest.ini",
                                  "worker.py"}
    assert guide_commands() == COMMANDS


def run(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.integration
async def test_a_scratch_project_follows_the_guide(env: WorkflowEnvironment,
                                                   tmp_path: Path) -> None:
    project = tmp_path / "triage"
    assert REPO not in project.parents  # outside this repository
    for path, body in guide_files().items():
        (project / path).parent.mkdir(parents=True, exist_ok=True)
        (project / path).write_text(body)
    (project / "workflows" / "__init__.py").write_text("")
    queue = f"triage-{uuid.uuid4().hex[:8]}"
    shell = {**cli_env(address_of(env)), "TOWER_TASK_QUEUE": queue,
             # The scratch project's own folders, not this repository's, come first.
             "PYTHONPATH": "", "PYTHONSAFEPATH": ""}
    python, commands = sys.executable, iter(COMMANDS)

    # In-process tests first: no server, no worker (the replay test skips: no histories).
    assert next(commands) == "python -m pytest -q tests"
    tested = run([python, "-m", "pytest", "-q", "tests", "-p", "no:cacheprovider"],
                 project, shell)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "2 passed, 1 skipped" in tested.stdout

    assert next(commands) == "python worker.py &"
    worker = await asyncio.create_subprocess_exec(
        python, "worker.py", cwd=project, env=shell, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT)
    try:
        assert worker.stdout is not None
        ready = await asyncio.wait_for(worker.stdout.readline(), 60)
        assert ready.decode().strip() == "worker ready"

        ran = run([TOWER, "run", "triage", "--input", '{"ticket": "Where is ORD-7?"}',
                   "--id", "triage-1", "--task-queue", queue], project, shell)
        assert next(commands).startswith("tower run triage")
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert "reply: Order ORD-7 is shipped." in ran.stdout
        assert "read" in ran.stdout and "→ DONE" in ran.stdout

        assert next(commands).endswith("tower history export triage-1 -o tests/histories/")
        (project / "tests" / "histories").mkdir(parents=True)
        exported = run([TOWER, "history", "export", "triage-1", "-o", "tests/histories/"],
                       project, shell)
        assert exported.returncode == 0, exported.stdout + exported.stderr
        assert (project / "tests" / "histories" / "triage-1.json").is_file()
    finally:
        worker.terminate()
        await worker.wait()

    # Replay needs no worker: the CLI and the project's own test replay the history.
    assert next(commands) == "tower replay tests/histories/"
    replayed = run([TOWER, "replay", "tests/histories/"], project, shell)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "1 ok, 0 failed" in replayed.stdout
    assert next(commands) == "python -m pytest -q tests"
    tested = run([python, "-m", "pytest", "-q", "tests", "-p", "no:cacheprovider"],
                 project, shell)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "3 passed" in tested.stdout

    # The project's own agents, and only them: Tower's example is nowhere to be found.
    drawn = run([TOWER, "graph", "triage"], project / "tests", shell)
    assert drawn.returncode == 0 and "read --> reply" in drawn.stdout, drawn.stderr
    unknown = run([TOWER, "graph", "refund"], project, shell)
    assert unknown.returncode == 2 and "unknown agent 'refund'" in unknown.stderr
    outside = run([TOWER, "graph", "triage"], project.parent, shell)
    assert outside.returncode == 2 and "no Tower project here" in outside.stderr


async def test_the_replay_helper_fails_a_history_the_code_no_longer_matches(
        tmp_path: Path) -> None:
    # The guide's replay test can fail: a history of another agent's run is refused.
    from tower.testing import assert_replays
    from workflows.company import CompanyAgent

    history = REPO / "tests" / "histories" / "account-1.json"
    with pytest.raises(AssertionError, match="account-1.json"):
        await assert_replays(history, workflows=[CompanyAgent])

"""docs/write-your-own-agent.md, followed as a reader would, outside this repository, with no
``TOWER_*`` variables and an empty ``HOME``:

- the files the page shows, written from its code blocks into an empty folder, pass their
  own tests there (the agent in process, its tool, a live run through its worker, replay);
- the page states the line count of that code, and it is the real one;
- they are the files ``tower new`` writes (the page and the template cannot drift apart):
  so the first point is also the proof that a new project's own tests pass as generated;
- (the soak tier) its commands, word for word: ``tower new``, ``pytest``, the worker, an
  approver's key, ``tower run`` to the gate, ``tower approve``, the history exported and
  replayed, ``tower graph`` finding only the project's agent."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tower.cli.cmd_new import render

pytestmark = pytest.mark.long  # a live run: collected first, so that xdist starts it early

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "write-your-own-agent.md"
REPO = GUIDE.parents[1]
BIN = Path(sys.executable).parent  # this environment's tower, pytest and python
# A file the reader writes: a fenced block whose info string names it (```python worker.py).
FILE = re.compile(r"^```(?:python|toml) (\S+)\n(.*?)^```$", re.M | re.S)
STATED = re.compile(r"(\d+)\s+lines\s+of\s+Python,\s+tests\s+included,\s+in\s+(\d+)\s+files")
# The page's commands, in its order; the soak test runs exactly these (the worker in the
# background; `tower dev`, which the page starts in another terminal, on a free port).
RUN_INPUT = '{"message": "Pay $250 to ACME"}'
COMMANDS = [
    "tower new payouts",
    "cd payouts",
    "pytest",
    "python worker.py &",
    "tower keys enrol alice --role approver",
    f"tower run payouts --id pay-1 --input '{RUN_INPUT}'",
    "tower approve pay-1 --by alice",
    "mkdir -p tests/histories && tower history export pay-1 -o tests/histories/",
    "tower replay tests/histories/",
    "pytest -k replay",
    "tower graph payouts",
]


def guide_files() -> dict[str, str]:
    """The files the page shows in full: path -> text."""
    found = FILE.findall(GUIDE.read_text())
    files = dict(found)
    assert len(files) == len(found), "the page shows a file twice"
    return files


def guide_commands() -> list[str]:
    blocks = re.findall(r"^```console\n(.*?)^```$", GUIDE.read_text(), re.M | re.S)
    return [line[2:] for block in blocks for line in block.splitlines() if line.startswith("$ ")]


def reader_env(home: Path) -> dict[str, str]:
    """A reader's shell: this environment's commands first, nothing of Tower's settings (nor
    Temporal's, a model key's or Python's), an empty home."""
    shell = {k: v for k, v in os.environ.items()
             if not k.startswith(("TOWER_", "TEMPORAL_", "OPENAI_", "PYTHON"))}
    shell.update(HOME=str(home), PATH=f"{BIN}{os.pathsep}{shell.get('PATH', '')}")
    return shell


def test_the_guide_lists_the_commands_the_soak_test_follows() -> None:
    assert guide_commands() == COMMANDS


def test_the_guide_states_the_line_count_of_its_code() -> None:
    python = {path: text for path, text in guide_files().items() if path.endswith(".py")}
    stated = STATED.findall(GUIDE.read_text())
    assert stated == [(str(sum(len(t.splitlines()) for t in python.values())),
                       str(len(python)))], stated
    assert sum(len(t.splitlines()) for t in python.values()) <= 250


def test_the_guides_files_are_the_ones_tower_new_writes() -> None:
    files, written = guide_files(), render("payouts")
    # Every file but the project's README.md and .gitignore, whole and unchanged.
    assert set(files) == set(written) - {"README.md", ".gitignore"}
    for path, text in files.items():
        assert text == written[path], f"the page's {path} is not the one tower new writes"


async def test_a_reader_writes_the_guides_files_and_their_tests_pass(tmp_path: Path) -> None:
    folder, home = tmp_path / "payouts", tmp_path / "home"
    home.mkdir()
    assert REPO not in folder.parents  # outside this repository
    for path, text in guide_files().items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(text)
    ran = await asyncio.to_thread(
        subprocess.run, [str(BIN / "pytest"), "-q", "-p", "no:cacheprovider", "-rs"],
        cwd=folder, env=reader_env(home), capture_output=True, text=True, timeout=600)
    # What the page says: 5 pass (the live run too), the replay waits for a kept history.
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr
    assert "5 passed, 1 skipped" in ran.stdout, ran.stdout[-3000:]
    assert "no history in tests/histories/ yet" in ran.stdout, ran.stdout[-3000:]
    assert "5 pass, and the replay test is skipped" in GUIDE.read_text()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def sh(*args: str, cwd: Path, env: dict[str, str], timeout: float = 240,
             ) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *args, cwd=cwd, env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    return proc.returncode or 0, out.decode()


async def background(*args: str, cwd: Path, env: dict[str, str]) -> tuple[
        asyncio.subprocess.Process, bytes]:
    """Start ``args``; the process and its first line of output (once it is ready)."""
    proc = await asyncio.create_subprocess_exec(
        *args, cwd=cwd, env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL)
    assert proc.stdout is not None
    return proc, await asyncio.wait_for(proc.stdout.readline(), 120)


async def stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.terminate()
        await proc.wait()


@pytest.mark.soak  # a whole project's life (its pytest, server, worker): the soak tier
@pytest.mark.integration
async def test_a_scratch_project_follows_the_guide(tmp_path: Path) -> None:
    scratch, home = tmp_path / "work", tmp_path / "home"
    scratch.mkdir()
    home.mkdir()
    assert REPO not in scratch.parents  # outside this repository
    shell = reader_env(home)
    commands = iter(COMMANDS)

    assert next(commands) == "tower new payouts"
    code, out = await sh("tower", "new", "payouts", cwd=scratch, env=shell)
    assert code == 0 and "workflows/payouts.py" in out, out
    assert next(commands) == "cd payouts"
    project = scratch / "payouts"

    # Plain pytest, as generated: in-process, the tool, a live run of its own, replay.
    assert next(commands) == "pytest"
    code, out = await sh("pytest", "-p", "no:cacheprovider", cwd=project, env=shell)
    assert code == 0, out
    assert "5 passed, 1 skipped" in out, out

    # `tower dev` in another terminal (here on a free port): it makes the dev trust.
    dev, ready = await background("tower", "dev", "--port", str(free_port()), "--headless",
                                  "--json", cwd=project, env=shell)
    worker = None
    try:
        shell["TEMPORAL_ADDRESS"] = json.loads(ready)["address"]
        assert next(commands) == "python worker.py &"
        worker, ready = await background("python", "worker.py", cwd=project, env=shell)
        assert ready.startswith(b"worker ready"), ready

        assert next(commands) == "tower keys enrol alice --role approver"
        code, out = await sh("tower", "keys", "enrol", "alice", "--role", "approver",
                             cwd=project, env=shell)
        assert code == 0, out
        assert (home / ".config" / "tower" / "keys" / "alice.jwk").is_file()  # the empty HOME

        assert next(commands).startswith("tower run payouts --id pay-1")
        code, out = await sh("tower", "run", "payouts", "--id", "pay-1", "--input", RUN_INPUT,
                             cwd=project, env=shell)
        assert code == 0 and "status: AWAITING_APPROVAL" in out, out
        assert "gate approval" in out and "role approver" in out, out

        assert next(commands) == "tower approve pay-1 --by alice"
        code, out = await sh("tower", "approve", "--yes", "pay-1", "--by", "alice", cwd=project,
                             env=shell)
        assert code == 0 and "status: DONE" in out and "Paid ACME $250.00" in out, out

        assert next(commands).endswith("tower history export pay-1 -o tests/histories/")
        (project / "tests" / "histories").mkdir(parents=True)
        code, out = await sh("tower", "history", "export", "pay-1", "-o", "tests/histories/",
                             cwd=project, env=shell)
        assert code == 0 and (project / "tests" / "histories" / "pay-1.json").is_file(), out
    finally:
        if worker is not None:
            await stop(worker)
        await stop(dev)

    # Replay needs no worker and no server: the CLI and the project's own test.
    assert next(commands) == "tower replay tests/histories/"
    code, out = await sh("tower", "replay", "tests/histories/", cwd=project, env=shell)
    assert code == 0 and "1 ok, 0 failed" in out, out
    assert next(commands) == "pytest -k replay"
    code, out = await sh("pytest", "-p", "no:cacheprovider", "-k", "replay", cwd=project,
                         env=shell)
    assert code == 0 and "1 passed, 5 deselected" in out, out

    # The project's own agent, and only it: Tower's example is nowhere to be found.
    assert next(commands) == "tower graph payouts"
    code, out = await sh("tower", "graph", "payouts", cwd=project / "tests", env=shell)
    assert code == 0 and "plan --> pay" in out, out
    code, out = await sh("tower", "graph", "refund", cwd=project, env=shell)
    assert code == 2 and "unknown agent 'refund'; known agents: payouts" in out, out
    code, out = await sh("tower", "graph", "payouts", cwd=scratch, env=shell)
    assert code == 2 and "no Tower project here" in out, out
    assert next(commands, None) is None


async def test_the_replay_helper_fails_a_history_the_code_no_longer_matches() -> None:
    # The project's replay test can fail: a history of another agent's run is refused.
    from tower.testing import assert_replays
    from workflows.company import CompanyAgent

    history = REPO / "tests" / "histories" / "account-1.json"
    with pytest.raises(AssertionError, match="account-1.json"):
        await assert_replays(history, workflows=[CompanyAgent])

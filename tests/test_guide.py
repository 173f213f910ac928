"""docs/write-your-own-agent.md, followed literally in a scratch folder outside this
repository, with no ``TOWER_*`` variables and an empty ``HOME``: ``tower new``, plain
``pytest`` in the new project (its in-process, tool, live and replay tests), then the page's
live run — the project's worker, an approver's key, ``tower run`` to the gate, ``tower
approve``, the history exported and replayed — and ``tower graph`` finding only the
project's agent. The page's code excerpts are checked against the files ``tower new`` writes."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import sys
from pathlib import Path

import pytest

from tower.cli.cmd_new import render

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "write-your-own-agent.md"
REPO = GUIDE.parents[1]
BIN = Path(sys.executable).parent  # this environment's tower, pytest and python
EXCERPT = re.compile(r"^```python (\S+)\n(.*?)^```$", re.M | re.S)
# The page's commands, in its order; the test runs exactly these (the worker in the
# background; `tower dev`, which the page starts in another terminal, on a free port).
RUN_INPUT = '{"message": "Pay $250 to ACME for invoice 42"}'
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
    "pytest tests/test_replay.py",
    "tower graph payouts",
]


def guide_commands() -> list[str]:
    blocks = re.findall(r"^```console\n(.*?)^```$", GUIDE.read_text(), re.M | re.S)
    return [line[2:] for block in blocks for line in block.splitlines() if line.startswith("$ ")]


def test_the_guide_lists_the_commands_this_test_follows() -> None:
    assert guide_commands() == COMMANDS


def test_the_guides_excerpts_are_in_the_files_tower_new_writes() -> None:
    files = render("payouts")
    excerpts = EXCERPT.findall(GUIDE.read_text())
    assert {path for path, _ in excerpts} == {"workflows/payouts.py", "worker.py",
                                              "activities/payments.py"}
    for path, text in excerpts:
        assert text in files[path], f"the guide's excerpt of {path} is not in it:\n{text}"


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
    shell = {k: v for k, v in os.environ.items()
             if not k.startswith(("TOWER_", "TEMPORAL_", "OPENAI_", "PYTHON"))}
    shell.update(HOME=str(home), PATH=f"{BIN}{os.pathsep}{shell.get('PATH', '')}")
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
    assert "10 passed, 1 skipped" in out, out

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
    assert next(commands) == "pytest tests/test_replay.py"
    code, out = await sh("pytest", "-p", "no:cacheprovider", "tests/test_replay.py",
                         cwd=project, env=shell)
    assert code == 0 and "1 passed" in out, out

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

"""The command line's frame, without a server: lazy loading, errors, pipes, follow order."""

from __future__ import annotations

import ast
import contextlib
import fcntl
import io
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType

from tower.cli.cli import COMMANDS, cli, main
from tower.cli.live import watch
from tower.cli.ui import default_ui, run_link
from tower.core.engine import Transition

TOWER = str(Path(sys.executable).parent / "tower")
HISTORY = Path(__file__).parents[1] / "histories" / "account-1.json"
HEAVY = ("temporalio", "pydantic", "openai", "rich", "workflows", "activities", "tower.core",
         "tower.contract", "tower.temporal", "tower.activities", "tower.cli.cmd")
# The failure model (stdlib only): the error printer knows a Tower error by its root class.
LIGHT = ("tower.contract", "tower.contract.failures", "tower.core")


def test_help_loads_no_command_and_nothing_heavy() -> None:
    probe = ("import sys\nfrom tower.cli.cli import main\ncode = main(['--help'])\n"
             f"print([m for m in sys.modules if m.split('.')[0] in {HEAVY!r}"
             f" or m.startswith({HEAVY!r})])\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    loaded = ast.literal_eval(done.stdout.splitlines()[-1])
    assert set(loaded) <= set(LIGHT), done.stdout
    for name in COMMANDS:  # every command is listed, with its line, from the registry alone
        assert f"\n  {name} " in done.stdout


def test_every_registered_command_loads_and_says_what_it_does() -> None:
    for name, (_, line) in COMMANDS.items():
        command = cli.get_command(None, name)  # type: ignore[arg-type]
        assert command is not None and command.name == name
        assert line and command.help, name


def test_usage_errors_exit_2_with_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["graph", "account", "--bogus"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: No such option '--bogus'") and "tower graph --help" in err
    assert main(["nope"]) == 2
    assert capsys.readouterr().err.startswith("error: No such command 'nope'")
    assert main(["graph", "nope", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: unknown agent 'nope'")
    assert json.loads(captured.out) == {"error": captured.err[7:].strip(), "exit_code": 2}


@pytest.mark.parametrize("args", [["graph", "account", "--json"],  # a plain command
                                  ["replay", str(HISTORY), "--json"]])  # an async one
def test_a_closed_pipe_ends_quietly(args: list[str]) -> None:
    """`tower ... | head -0`: the reader is gone before the first write."""
    proc = subprocess.Popen([TOWER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 1 and err == ""  # 1: what click (and Python) exit with


def test_ui_links_are_links_whatever_the_run_id() -> None:
    # Without a record of its own, a server's UI is on its host's port 8233.
    assert default_ui("127.0.0.1:7233") == "http://localhost:8233"
    assert default_ui("temporal.example.com:7233") == "http://temporal.example.com:8233"
    assert run_link(None, "default", "r-1") is None  # headless: no link at all
    # A hostile id stays inside the link: percent-encoded, no escape reaches the terminal.
    assert run_link("http://localhost:9400", "default", "a b/\x1b[31m#x") == \
        "http://localhost:9400/namespaces/default/workflows/a%20b%2F%1B%5B31m%23x"


@dataclass
class _Info:
    start_time: datetime | None = None
    status: Any = None


class RaceHandle:
    """A run that makes one move between any two queries, and ends at its 4th move: the
    race a follower loses when it reads the log before the status."""

    id = "race-1"

    def __init__(self) -> None:
        self.calls = 0

    async def describe(self) -> _Info:
        return _Info(start_time=datetime(2026, 12, 2, tzinfo=UTC))

    async def fetch_history_events(self, page_size: int = 0) -> AsyncIterator[Any]:
        from temporalio.api.history.v1 import HistoryEvent

        # It has run a workflow task: the follower may ask it.
        yield HistoryEvent(event_id=4, event_type=EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)

    async def query(self, query: Any, result_type: Any = None) -> Any:
        name = query if isinstance(query, str) else query.__name__  # a method reference
        moves = min(self.calls, 4)
        self.calls += 1
        if name in ("status", "query_status"):
            return "DONE" if moves == 4 else "RUNNING"
        return [Transition(step=i + 1, source="a", target="DONE" if i == 3 else "a",
                           reason="r", at=datetime(2026, 12, 2, tzinfo=UTC), event_id=1)
                for i in range(moves)]


async def test_a_followed_run_shows_every_move_up_to_its_end() -> None:
    out = io.StringIO()
    progress = await watch(RaceHandle(), as_json=True, out=out,  # type: ignore[arg-type]
                           poll_seconds=0)
    assert progress.status == "DONE"
    assert [json.loads(line)["step"] for line in out.getvalue().splitlines()] == [1, 2, 3, 4]


def test_a_table_on_a_narrow_terminal_keeps_every_column_and_cell() -> None:
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    proc = subprocess.Popen([TOWER, "inspect", str(HISTORY)], stdout=follower,
                            stderr=subprocess.PIPE, env={**os.environ, "TERM": "xterm"})
    os.close(follower)
    shown = b""
    with contextlib.suppress(OSError):  # EIO once the command has exited
        while chunk := os.read(leader, 4096):
            shown += chunk
    os.close(leader)
    assert proc.wait(timeout=60) == 0
    text = re.sub(r"\x1b\[[0-9;]*m", "", shown.decode())
    for word in ("STEP", "EVENT", "REASON", "lookup_account", "guard has_answer held", "…"):
        assert (word in text) == (word != "…"), word

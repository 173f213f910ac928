"""A real terminal for CLI tests: `tower` run in a tmux pane of a given width, and what the
screen shows read back with ``capture-pane`` (what a person sees, after the terminal has
interpreted every byte: a raw ESC or CR would have rewritten it)."""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from towercli import TOWER

CONF = "set -g history-limit 100000\nset -g remain-on-exit on\nset -g status off\n"


class Terminal:
    """One tmux server of this test's own (its own socket), one pane per command."""

    def __init__(self, folder: Path) -> None:
        self.socket = f"tower-test-{uuid.uuid4().hex[:8]}"
        self.folder = folder
        (folder / "tmux.conf").write_text(CONF)

    def _tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, "-f", str(self.folder / "tmux.conf"),
                               *args], check=True, capture_output=True, text=True).stdout

    def start(self, name: str, argv: list[str], env: dict[str, str], cwd: Path,
              width: int) -> None:
        """Run ``tower *argv`` in a new pane ``width`` columns wide."""
        script = self.folder / f"{name}.sh"
        exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
        script.write_text(f"{exports}cd {shlex.quote(str(cwd))}\n"
                          f"{shlex.join([TOWER, *argv])}\necho \"[exit $?]\"\n")
        self._tmux("new-session", "-d", "-s", name, "-x", str(width), "-y", "50",
                   f"bash {shlex.quote(str(script))}")

    def screen(self, name: str) -> str:
        """Everything the pane showed, history included, wrapped lines joined."""
        return self._tmux("capture-pane", "-p", "-J", "-S", "-", "-E", "-", "-t", name)

    def rows(self, name: str) -> list[str]:
        """The pane's rows as drawn, history included: a line the terminal wrapped is
        several rows here (``screen`` joins them)."""
        return self._tmux("capture-pane", "-p", "-S", "-", "-E", "-", "-t", name).splitlines()

    def keys(self, name: str, *keys: str) -> None:
        self._tmux("send-keys", "-t", name, *keys)

    async def wait_for(self, name: str, text: str, timeout: float = 90) -> str:
        shown = ""
        try:
            async with asyncio.timeout(timeout):
                while text not in (shown := self.screen(name)):
                    await asyncio.sleep(0.3)
        except TimeoutError:  # what the terminal showed instead: the only clue afterwards
            raise AssertionError(f"{text!r} not shown in {name} within {timeout} s; it "
                                 f"showed:\n{shown}") from None
        return shown

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)
        # The server is gone; its socket file is not always.
        root = Path(os.environ.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}"
        (root / self.socket).unlink(missing_ok=True)


@asynccontextmanager
async def terminal(folder: Path) -> AsyncIterator[Terminal]:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    term = Terminal(folder)
    try:
        yield term
    finally:
        term.close()


def cli_env(address: str, **extra: str) -> dict[str, str]:
    """What a user's shell holds for `tower`: the test server, the session's keys and trust."""
    env = {k: v for k, v in os.environ.items()
           if k in ("PATH", "HOME", "LANG", "LC_ALL", "VIRTUAL_ENV")}
    env.update({"TEMPORAL_ADDRESS": address, "TOWER_CONFIG_DIR": os.environ["TOWER_CONFIG_DIR"],
                "TOWER_TRUST_DIR": os.environ["TOWER_TRUST_DIR"],
                "TOWER_TASK_QUEUES": os.environ.get("TOWER_TASK_QUEUES", ""),
                "LANG": "C.UTF-8", **extra})
    return env

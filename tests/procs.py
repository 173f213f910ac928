"""Real processes for the fault tests: `python worker.py` and `temporal server start-dev`,
started, killed with SIGKILL and restarted the way an operator (or a crash) would."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from tower.cli.devserver import dev_server_command, prepare

REPO = Path(__file__).resolve().parent.parent
# What a worker's log may show for an exception someone handled on purpose: a classified
# activity failure (retried or failing the node), or the SDK's cancel of an activity attempt
# the server had given up on (raised into the activity's thread wherever it is, e.g. in
# SQLite's BEGIN; that attempt's effect is fenced off by reconcile, docs/reliability.md).
# Anything else with a traceback is an exception nobody handled.
HANDLED = re.compile(r"temporalio\.exceptions\.(ApplicationError|CancelledError): "
                     r"|\._task_time\.AheadOfItsTask: ")
AHEAD = re.compile(r"\._task_time\.AheadOfItsTask: ")
# The tests' Temporal dev servers (Go): one thread running Go code and a lazier collector.
# Four servers and their test processes share two cores, and a server is much of a test's
# CPU (4.2 of tests/test_gates_refund.py's 10 CPU-s): these cut it by a fifth (to 3.3),
# for ~300 MB of memory per server at most. What the server does is the same.
LEAN_GO = {"GOMAXPROCS": "1", "GOGC": "400"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class WorkerProcess:
    """`python worker.py` pointed at a test's server, task queue, database and model."""

    def __init__(self, address: str, task_queue: str, db_path: Path, model_url: str,
                 log_path: Path, *, models: str = "primary,backup", timeout: float = 60,
                 argv: tuple[str, ...] = ("worker.py",)) -> None:
        self.env = {**os.environ, "TEMPORAL_ADDRESS": address, "TOWER_TASK_QUEUE": task_queue,
                    "TOWER_DB": str(db_path), "OPENAI_API_KEY": "loopback",
                    "OPENAI_BASE_URL": model_url, "TOWER_MODELS": models,
                    "TOWER_MODEL_TIMEOUT": str(timeout), "PYTHONUNBUFFERED": "1"}
        self.argv = argv
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen([sys.executable, *self.argv], cwd=REPO, env=self.env,
                                         stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        return self

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGINT)  # the worker shuts down cleanly on Ctrl-C
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.kill9()

    def unhandled(self) -> list[str]:
        """Tracebacks in the log whose exception was not a handled, classified one."""
        text = self.log_path.read_text(errors="replace")
        # One record per log line the worker wrote (they start with the time), with
        # any traceback (chained causes included) that belongs to it.
        records = re.split(r"\n(?=\d{4}-\d{2}-\d{2} )", text)
        # Head and tail: the tail names the exception.
        bad = [r if len(r) < 1200 else f"{r[:500]} … {r[-600:]}"
               for r in records if "Traceback" in r and not HANDLED.search(r)]
        # (An activation a query's replay ran ahead of its task fails on purpose: the run
        # is replayed again in that task, tower/temporal/_task_time.py.)
        fatal = [r.splitlines()[0] for r in records
                 if ("Failed activation" in r and AHEAD.search(r) is None)
                 or "Fatal Python error" in r or "Task exception was never retrieved" in r]
        return bad + fatal


class DevServer:
    """`temporal server start-dev` on its own port and SQLite file, set up like `tower dev`,
    restartable."""

    def __init__(self, db: Path, log_path: Path) -> None:
        self.port = free_port()
        self.cmd = dev_server_command(port=self.port, db=db, headless=True)
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> Client:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT,
                                         env={**os.environ, **LEAN_GO},
                                         start_new_session=True)
        for _ in range(120):
            try:
                client = await Client.connect(self.address,
                                              data_converter=pydantic_data_converter)
            except RuntimeError:
                await asyncio.sleep(0.5)
                continue
            await prepare(client, ui=None)  # as `tower dev --headless` does (idempotent)
            return client
        raise AssertionError(f"dev server did not come up; see {self.log_path}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


@asynccontextmanager
async def worker_pool(address: str, task_queue: str, folder: Path, count: int
                      ) -> AsyncIterator[dict[str, subprocess.Popen[bytes]]]:
    """``count`` `python worker.py` processes on one queue sharing one tools database
    (folder/tools.sqlite), keyed by Temporal identity; each logs to folder/worker-N.log."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TEMPORAL_"))}
    environ = {**base, "TEMPORAL_ADDRESS": address, "TOWER_DB": str(folder / "tools.sqlite"),
               "TOWER_MESSAGES": str(folder / "messages.sqlite")}
    procs = []
    for i in range(count):
        with (folder / f"worker-{i}.log").open("wb") as log:
            procs.append(subprocess.Popen(
                [sys.executable, "worker.py", "--task-queue", task_queue], cwd=REPO,
                env=environ, stdout=log, stderr=subprocess.STDOUT))
    try:
        await _ready(procs, folder)
        # Each worker's Temporal identity is the SDK's default, pid@host.
        yield {f"{p.pid}@{socket.gethostname()}": p for p in procs}
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


async def _ready(procs: list[subprocess.Popen[bytes]], folder: Path) -> None:
    """Wait until every worker says it is ready; a worker that exits or stays silent fails
    the test with its log. (Not the server's list of pollers: on the dev server a poll can
    wait on a partition that list does not show for up to a minute.)"""
    async with asyncio.timeout(120):
        while True:
            texts = [(folder / f"worker-{i}.log").read_text(errors="replace")
                     for i in range(len(procs))]
            for p, text in zip(procs, texts, strict=True):
                assert p.poll() is None, f"a worker exited ({p.returncode}): ...{text[-1500:]}"
            if all("worker ready" in text for text in texts):
                return
            await asyncio.sleep(0.2)

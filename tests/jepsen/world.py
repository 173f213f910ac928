"""What the trials share (server, workers, database) and what one trial notes."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from procs import REPO, WorkerProcess
from temporalio.client import Client

from tower.temporal._task_time import QueryAskedAgain

from .bounds import bounded

T = TypeVar("T")


class Zygote:
    """``python -m tests.jepsen.worker --forks`` (worker.py's ``forks``) on ``env``: the one
    Python start-up the workers of a run share; each ``fork`` is a new worker process."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.jepsen.worker", "--forks"], cwd=REPO, env=env,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=out,
                start_new_session=True)

    def fork(self, log: Path) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{log}\n".encode())
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if not answer:
            raise RuntimeError(f"the workers' zygote is gone (exit {self.proc.wait()})")
        return int(answer)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()  # it exits at the end of its input
        self.proc.wait(timeout=10)


class ForkedWorker(WorkerProcess):
    """A checker worker forked by ``zygote``: started, SIGKILLed, stopped with SIGINT and its
    log read as a fresh `python` worker's (WorkerProcess), its pid followed by a pidfd (it is
    the zygote's child, not this process's)."""

    def __init__(self, zygote: Zygote, log_path: Path) -> None:
        super().__init__("", "", Path(), "", log_path)  # (its settings are the zygote's)
        self.zygote, self.pid, self.pidfd = zygote, 0, -1

    def start(self) -> ForkedWorker:
        self.pid = self.zygote.fork(self.log_path)
        try:
            self.pidfd = os.pidfd_open(self.pid)
        except ProcessLookupError:  # dead already
            self.pidfd = -1
        return self

    def alive(self) -> bool:
        return self.pidfd >= 0 and not select.select([self.pidfd], [], [], 0)[0]

    def wait(self, timeout: float) -> None:
        if self.pidfd >= 0 and not select.select([self.pidfd], [], [], timeout)[0]:
            raise TimeoutError(f"worker {self.pid} still running after {timeout} s")
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1

    def send_signal(self, number: int) -> None:
        if self.alive():  # (by its pidfd: never another process that took its pid)
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self.pidfd, number)

    def kill9(self) -> None:
        self.send_signal(signal.SIGKILL)
        self.wait(timeout=10)

    def stop(self) -> None:
        if not self.alive():
            return
        self.send_signal(signal.SIGINT)  # the worker shuts down cleanly on Ctrl-C
        try:
            self.wait(timeout=20)
        except TimeoutError:
            self.kill9()


@dataclass
class World:
    client: Client
    db_path: Path
    task_queue: str
    workers: list[ForkedWorker]
    evidence: Path | None = None  # where a failed trial's histories go (evidence.py)
    pg: str = ""  # the refunds' PostgreSQL database ("": the tools' SQLite file; store.py)
    kills: Path | None = None  # where trials arm kills at an effect's points (kills.py)

    def __post_init__(self) -> None:
        # Queries asked as tower.client asks them: again when one meets a replay ahead of its
        # task (an approver that met it once stopped answering; its run waited at the gate).
        config = self.client.config()
        config["interceptors"] = [QueryAskedAgain()]
        self.client = Client(**config)


@dataclass
class Notes:
    """What a trial met (faults, operator actions) and what its harness could not do."""

    faults: list[str] = field(default_factory=list)
    harness: list[str] = field(default_factory=list)
    doing: str = "starting"
    runs: list[str] = field(default_factory=list)  # the workflow ids the trial started
    refused: list[str] = field(default_factory=list)  # the approver's refused decisions' codes

    async def step(self, what: str, seconds: float, step: Awaitable[T]) -> T:
        """One bounded step of the trial's main line (``doing`` names it meanwhile)."""
        self.doing = what
        return await bounded(what, seconds, step)


@dataclass
class Outcome:
    trial: int
    invoice: str
    runs: int
    faults: list[str]
    problems: list[str]  # violations of the money path's rules
    harness: list[str] = field(default_factory=list)  # what the harness could not finish
    seconds: float = 0.0
    evidence: Path | None = None  # the failed trial's saved histories (evidence.py)
    stuck: list[str] = field(default_factory=list)  # runs RUNNING with nothing pending
    refused: list[str] = field(default_factory=list)  # Notes.refused

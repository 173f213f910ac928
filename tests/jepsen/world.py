"""What the trials share (server, workers, database) and what one trial notes."""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from procs import WorkerProcess
from temporalio.client import Client

from tower.temporal._task_time import QueryAskedAgain

from .bounds import bounded

T = TypeVar("T")


@dataclass
class World:
    client: Client
    db_path: Path
    task_queue: str
    workers: list[WorkerProcess]
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

"""Tools: ``@tool`` functions on the tools' database, by area; the worker binds the database.

Workflows import the tools themselves (``from activities.tools.billing import
issue_refund``); the worker makes their activities from the agents' graphs, binding each
tool's ``db`` to ``ToolsDb`` (worker.py). ``TOOLS`` is every tool, by name, for tests.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tower import Tool
from tower.effects import Postgres, SQLite, ToolCall, run_tool

from . import accounts, billing, helpdesk, migrations, onboarding, orders, research
from .db import PgTools, connect, is_postgres, open_postgres

TOOLS: dict[str, Tool] = {t.name: t for t in [
    *accounts.TOOLS, *billing.TOOLS, *helpdesk.TOOLS, *onboarding.TOOLS, *research.TOOLS,
    *migrations.TOOLS, *orders.TOOLS]}
# Where a worker keeps its own files (worker.py's default tools' database is in it).
LOCAL = Path(".tower")


class ToolsDb:
    """The tools' database, what every tool's ``db`` is bound to: a SQLite file, or a
    ``postgresql://`` URL (TOWER_DB). A ``tower.effects`` database: each call runs in one
    transaction of it (a side effect's with Tower's record of it).

    Args:
        db: the SQLite file or the PostgreSQL URL.
        local_dir: with the tools on PostgreSQL, this worker's own folder: the migration
            tools' example databases go in its ``databases/`` (a SQLite tools' database
            keeps them beside itself).
    """

    def __init__(self, db: str | Path, *, local_dir: str | Path = LOCAL) -> None:
        self.db: SQLite | Postgres
        self.databases: Path | None = None  # set: the tools are on PostgreSQL
        if is_postgres(db):
            self.databases = Path(local_dir) / "databases"
            pg = open_postgres(str(db), self.databases)  # made and seeded once
            self.db, self.where = pg, (f"{pg.describe()} (the migration tools' example "
                                       f"databases: this host's {self.databases})")
        else:
            self.db_path = Path(db)
            connect(self.db_path).close()  # create and seed once, before any activity runs
            lite = SQLite(self.db_path)
            self.db, self.where = lite, lite.describe()
        self.for_update = self.db.for_update

    def describe(self) -> str:
        """Where the tools' database is, for a start-up line (a password never shown)."""
        return self.where

    def run(self, work: Callable[[Any], Any]) -> Any:
        """``work`` in one transaction, given what a tool's ``db`` is: the transaction
        itself (SQLite), or on PostgreSQL with this worker's example databases."""
        if self.databases is None:
            return self.db.run(work)
        folder = self.databases
        return self.db.run(lambda tx: work(PgTools(tx, folder)))

    def read(self, work: Callable[[Any], Any]) -> Any:
        """``work`` for a tool that only reads: on SQLite without the write lock."""
        if self.databases is None:
            assert isinstance(self.db, SQLite)
            return self.db.read(work)
        return self.run(work)

    def call(self, tool: Tool, call: ToolCall, *, epoch: int | None = None) -> dict[str, Any]:
        """Run ``tool`` here as its activity would, for a test: a side effect exactly once
        per key (``tower.effects``), a read in a transaction of its own."""
        return dict(run_tool(tool, self, call, epoch=epoch))


__all__ = ["TOOLS", "ToolsDb"]

"""Tools: typed arguments, an implementation on the tools' database, and the activities.

``TOOLS`` is the explicit registry (no discovery). Workflows import this module
only for the tools' names and argument schemas; the functions run in activities.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from tower import ToolCall, ToolSchema
from tower.effects import Database, EffectCall, EffectTool, SQLite

from . import accounts, billing, helpdesk, migrations, onboarding, orders, research
from .db import PgTools, connect, is_postgres, open_db, open_postgres
from .spec import Db, Tool

TOOLS: dict[str, Tool] = {t.name: t for t in [
    *accounts.TOOLS, *billing.TOOLS, *helpdesk.TOOLS, *onboarding.TOOLS, *research.TOOLS,
    *migrations.TOOLS,
    *orders.TOOLS]}
# Where a worker keeps its own files (worker.py's default tools' database is in it).
LOCAL = Path(".tower")


def schema_of(name: str) -> ToolSchema:
    return TOOLS[name].schema()


class ToolBox:
    """Hosts every tool as its own activity (named after the tool) on one database; the
    side-effecting ones are ``tower.effects`` tools: the guard and the write are the
    tool's, the claim, the fence and the record of the result Tower's, in one transaction.

    Args:
        db: the tools' database: a SQLite file, or a ``postgresql://`` URL (TOWER_DB).
        local_dir: with the tools on PostgreSQL, this worker's own folder: the migration
            tools' example databases go in its ``databases/`` (a SQLite tools' database
            keeps them beside itself).
    """

    def __init__(self, db: str | Path, *, local_dir: str | Path = LOCAL) -> None:
        self.db: Database
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

    def describe(self) -> str:
        """Where the tools' database is, for a start-up line (a password never shown)."""
        return self.where

    def activities(self) -> list[Callable[..., Any]]:
        return [self._activity(tool) for tool in TOOLS.values() if not tool.control]

    def _activity(self, tool: Tool) -> Callable[[ToolCall], Any]:
        if tool.side_effect:
            return as_effect(tool, self._tools_db).on(self.db)

        def run(call: ToolCall) -> dict[str, Any]:
            return self.call(tool, call)

        run.__name__ = run.__qualname__ = tool.name
        # Activity names are part of the history's contract: keep them stable.
        return activity.defn(name=tool.name)(run)

    def call(self, tool: Tool, call: ToolCall, *, epoch: int | None = None) -> dict[str, Any]:
        if tool.side_effect:
            return as_effect(tool, self._tools_db).call(self.db, call, epoch=epoch)
        try:
            args = tool.args.model_validate(call.arguments)
        except ValidationError as exc:
            # Retrying cannot fix bad arguments: fail fast and let the node decide.
            raise ApplicationError(f"bad arguments for {tool.name}: {exc}",
                                   type="BadToolArguments", non_retryable=True) from exc
        if self.databases is not None:  # a read in one transaction of its own
            out: dict[str, Any] = self.db.run(
                lambda tx: tool.run(self._tools_db(tx), args, call.idempotency_key))
            return out
        db = open_db(self.db_path)
        try:
            return tool.run(db, args, call.idempotency_key)
        finally:
            db.close()

    def _tools_db(self, tx: Any) -> Db:
        """What a tool is given: the transaction itself (SQLite), or on PostgreSQL the
        transaction with this worker's folder of example databases."""
        return tx if self.databases is None else PgTools(tx, self.databases)


def as_effect(tool: Tool, tools_db: Callable[[Any], Db] = lambda tx: tx) -> EffectTool[Any]:
    """The tool as a ``tower.effects`` tool: its guard (invariants), then its write, on
    ``tools_db(the effect's transaction)``."""
    def business(tx: Any, args: Any, call: EffectCall) -> dict[str, Any]:
        db = tools_db(tx)
        if tool.guard is not None:
            tool.guard(db, args, call.authority)
        return tool.run(db, args, call.key)

    return EffectTool(tool.name, tool.args, business)


__all__ = ["TOOLS", "Tool", "ToolBox", "schema_of"]

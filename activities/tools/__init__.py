"""Tools: typed arguments, an implementation on the SQLite world, and the activities.

``TOOLS`` is the explicit registry (no discovery). Workflows import this module
only for the tools' names and argument schemas; the functions run in activities.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from tower import ToolCall, ToolSchema
from tower.effects import EffectCall, EffectTool, SQLite

from . import accounts, billing, helpdesk, migrations, onboarding, orders, research
from .db import connect, open_db
from .spec import Tool

TOOLS: dict[str, Tool] = {t.name: t for t in [
    *accounts.TOOLS, *billing.TOOLS, *helpdesk.TOOLS, *onboarding.TOOLS, *research.TOOLS,
    *migrations.TOOLS,
    *orders.TOOLS]}


def schema_of(name: str) -> ToolSchema:
    return TOOLS[name].schema()


class ToolBox:
    """Hosts every tool as its own activity (named after the tool) on one database; the
    side-effecting ones are ``tower.effects`` tools: the guard and the write are the
    tool's, the claim, the fence and the record of the result Tower's, in one transaction."""

    def __init__(self, db_path: str | Path) -> None:
        self.db_path = Path(db_path)
        connect(self.db_path).close()  # create and seed once, before any activity runs
        self.db = SQLite(self.db_path)

    def activities(self) -> list[Callable[..., Any]]:
        return [self._activity(tool) for tool in TOOLS.values() if not tool.control]

    def _activity(self, tool: Tool) -> Callable[[ToolCall], Any]:
        if tool.side_effect:
            return as_effect(tool).on(self.db)

        def run(call: ToolCall) -> dict[str, Any]:
            return self.call(tool, call)

        run.__name__ = run.__qualname__ = tool.name
        # Activity names are part of the history's contract: keep them stable.
        return activity.defn(name=tool.name)(run)

    def call(self, tool: Tool, call: ToolCall, *, epoch: int | None = None) -> dict[str, Any]:
        if tool.side_effect:
            return as_effect(tool).call(self.db, call, epoch=epoch)
        try:
            args = tool.args.model_validate(call.arguments)
        except ValidationError as exc:
            # Retrying cannot fix bad arguments: fail fast and let the node decide.
            raise ApplicationError(f"bad arguments for {tool.name}: {exc}",
                                   type="BadToolArguments", non_retryable=True) from exc
        db = open_db(self.db_path)
        try:
            return tool.run(db, args, call.idempotency_key)
        finally:
            db.close()


def as_effect(tool: Tool) -> EffectTool[Any]:
    """The tool as a ``tower.effects`` tool: its guard (invariants), then its write."""
    def business(db: sqlite3.Connection, args: Any, call: EffectCall) -> dict[str, Any]:
        if tool.guard is not None:
            tool.guard(db, args, call.authority)
        return tool.run(db, args, call.key)

    return EffectTool(tool.name, tool.args, business)


__all__ = ["TOOLS", "Tool", "ToolBox", "schema_of"]

"""Tools: typed arguments, an implementation on the SQLite world, and the activities.

``TOOLS`` is the explicit registry (no discovery). Workflows import this module
only for the tools' names and argument schemas; the functions run in activities.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from tower import ToolCall, ToolSchema

from . import accounts, billing, helpdesk, migrations, onboarding, orders, research
from .db import connect, open_db
from .effects import begin_immediate, claim, epoch_now, reconcile
from .spec import NoEffect, Tool, ToolRefused

TOOLS: dict[str, Tool] = {t.name: t for t in [
    *accounts.TOOLS, *billing.TOOLS, *helpdesk.TOOLS, *onboarding.TOOLS, *research.TOOLS,
    *migrations.TOOLS,
    *orders.TOOLS]}


def schema_of(name: str) -> ToolSchema:
    return TOOLS[name].schema()


class ToolBox:
    """Hosts every tool as its own activity (named after the tool) on one database."""

    def __init__(self, db_path: str | Path) -> None:
        self.db_path = Path(db_path)
        connect(self.db_path).close()  # create and seed once, before any activity runs

    def activities(self) -> list[Callable[..., Any]]:
        tools = [self._activity(tool) for tool in TOOLS.values() if not tool.control]
        return [*tools, self.reconcile_activity()]

    def _activity(self, tool: Tool) -> Callable[[ToolCall], dict[str, Any]]:
        def run(call: ToolCall) -> dict[str, Any]:
            return self.call(tool, call)

        run.__name__ = run.__qualname__ = tool.name
        # Activity names are part of the history's contract: keep them stable.
        return activity.defn(name=tool.name)(run)

    def call(self, tool: Tool, call: ToolCall, *, epoch: int | None = None) -> dict[str, Any]:
        try:
            args = tool.args.model_validate(call.arguments)
        except ValidationError as exc:
            # Retrying cannot fix bad arguments: fail fast and let the node decide.
            raise ApplicationError(f"bad arguments for {tool.name}: {exc}",
                                   type="BadToolArguments", non_retryable=True) from exc
        db = open_db(self.db_path)
        try:
            if not tool.side_effect:
                return tool.run(db, args, call.idempotency_key)
            return self._effect(db, tool, args, call, epoch_now() if epoch is None else epoch)
        finally:
            db.close()

    def _effect(self, db: sqlite3.Connection, tool: Tool, args: BaseModel, call: ToolCall,
                epoch: int) -> dict[str, Any]:
        """Fence, idempotency record, invariants and effect: one transaction (effects.py)."""
        asked = json.dumps(args.model_dump(mode="json"), sort_keys=True)
        begin_immediate(db)
        try:
            return self._in_transaction(db, tool, args, call, epoch, asked)
        except NoEffect as nothing:  # rolled back: no effect, no key
            return nothing.result

    def _in_transaction(self, db: sqlite3.Connection, tool: Tool, args: BaseModel,
                        call: ToolCall, epoch: int, asked: str) -> dict[str, Any]:
        key = call.idempotency_key
        with db:  # commits on return, rolls back on any exception
            done = db.execute("SELECT result, arguments FROM effects WHERE idempotency_key=?",
                              (key,)).fetchone()
            if done is not None:  # made before: the same result, whoever asks
                _same_effect(tool.name, done["arguments"], asked)
                return dict(json.loads(done["result"]))
            claim(db, key, epoch)
            if tool.guard is not None:
                try:
                    tool.guard(db, args, call.authority)
                except ToolRefused as exc:
                    raise ApplicationError(exc.message, {"code": exc.code, "tool": tool.name},
                                           type="ToolRefused", non_retryable=True) from None
            result = tool.run(db, args, key)
            db.execute("INSERT INTO effects (idempotency_key, tool, result, arguments) "
                       "VALUES (?,?,?,?)", (key, tool.name, json.dumps(result), asked))
        return result

    def reconcile_activity(self) -> Callable[[str], dict[str, Any] | None]:
        @activity.defn(name="reconcile_effect")
        def reconcile_effect(key: str) -> dict[str, Any] | None:
            """The effect made under ``key`` (None: none, and none can be made any more by
            an attempt given up on): what a run reads before it gives up on a side effect."""
            db = open_db(self.db_path)
            try:
                return reconcile(db, key, epoch_now())
            finally:
                db.close()

        return reconcile_effect


def _same_effect(tool: str, done_with: str | None, asked: str) -> None:
    """The key was used before: only the very same call may take its result. The same key
    with other arguments is a fork (or a reused step) asking for another effect where one
    was already made: refuse, rather than act twice or report the wrong effect."""
    if done_with is not None and done_with != asked:
        raise ApplicationError(
            f"{tool} already ran for this step of this run (or of the run it was forked from) "
            f"with {done_with}; refusing to run it again with {asked}",
            type="EffectConflict", non_retryable=True)


__all__ = ["TOOLS", "Tool", "ToolBox", "schema_of"]

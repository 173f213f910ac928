"""Tools: typed arguments, an implementation on the SQLite world, and the activities.

``TOOLS`` is the explicit registry (no discovery). Workflows import this module
only for the tools' names and argument schemas; the functions run in activities.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from tower.contract.wire import ToolCall, ToolSchema

from . import accounts, billing, helpdesk, migrations, onboarding, orders, research
from .db import connect
from .spec import Tool

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
        return [self._activity(tool) for tool in TOOLS.values() if not tool.control]

    def _activity(self, tool: Tool) -> Callable[[ToolCall], dict[str, Any]]:
        def run(call: ToolCall) -> dict[str, Any]:
            return self.call(tool, call)

        run.__name__ = run.__qualname__ = tool.name
        # Activity names are part of the history's contract: keep them stable.
        return activity.defn(name=tool.name)(run)

    def call(self, tool: Tool, call: ToolCall) -> dict[str, Any]:
        try:
            args = tool.args.model_validate(call.arguments)
        except ValidationError as exc:
            # Retrying cannot fix bad arguments: fail fast and let the node decide.
            raise ApplicationError(f"bad arguments for {tool.name}: {exc}",
                                   type="BadToolArguments", non_retryable=True) from exc
        asked = json.dumps(args.model_dump(mode="json"), sort_keys=True)
        db = connect(self.db_path)
        try:
            with db:  # one transaction: the effect and its idempotency record, or neither
                if tool.side_effect:
                    # Take the write lock before looking: two attempts with one key
                    # (a timed-out attempt still running, its retry) then serialize.
                    db.execute("BEGIN IMMEDIATE")
                    done = db.execute(
                        "SELECT result, arguments FROM effects WHERE idempotency_key=?",
                        (call.idempotency_key,)).fetchone()
                    if done is not None:
                        _same_effect(tool.name, done["arguments"], asked)
                        return dict(json.loads(done["result"]))
                result = tool.run(db, args, call.idempotency_key)
                if tool.side_effect:
                    db.execute("INSERT INTO effects (idempotency_key, tool, result, arguments) "
                               "VALUES (?,?,?,?)",
                               (call.idempotency_key, tool.name, json.dumps(result), asked))
            return result
        finally:
            db.close()


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

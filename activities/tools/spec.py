"""What a tool is: a name, typed arguments, and a function on the tools' database.

A side-effecting one runs as a ``tower.effects`` tool (claim, fence, record: Tower's)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel

from tower import Authority, ToolSchema
from tower.effects import EffectRefused, NoEffect


class Db(Protocol):
    """The tools' database as a tool sees it, on SQLite (``sqlite3.Connection``) or on
    PostgreSQL (``tower.effects.Postgres``'s connection): ``?`` placeholders on both; a
    row reads as ``row[0]``, ``row["column"]`` and ``dict(row)``. Write SQL both take:
    ``INSERT ... RETURNING id`` (not ``lastrowid``), ``ON CONFLICT DO NOTHING``."""

    def execute(self, sql: str, params: Sequence[Any] = ..., /) -> Any: ...

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]], /) -> Any: ...


ToolFn = Callable[[Db, Any, str], dict[str, Any]]
# (db, validated args, what the run's recorded state authorizes) -> None, or raises
# EffectRefused. Runs in the effect's own transaction, under the write lock.
GuardFn = Callable[[Db, Any, Authority], None]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    args: type[BaseModel]
    run: ToolFn  # (db, validated args, idempotency key) -> JSON-able result
    side_effect: bool = False
    # The effect's invariants, checked in the same transaction as the effect.
    guard: GuardFn | None = None
    # A control tool is a signal from the model to its node (e.g. advance_to_next_step):
    # the node reads the call; no activity exists for it.
    control: bool = False
    # start-to-close per attempt: a worker that dies mid-call is retried after this.
    timeout_seconds: float = 10.0
    # Attempts Temporal makes before the node sees the failure (then, for a side
    # effect, the run reconciles by key before it gives up).
    attempts: int = 5

    def schema(self) -> ToolSchema:
        return ToolSchema(name=self.name, description=self.description,
                          parameters=_json_schema(self.args))


@functools.cache
def _json_schema(args: type[BaseModel]) -> dict[str, Any]:
    # Built once per process: every model call sends its node's tools (a replay of a long
    # thread rebuilt the same schema at every turn, ~9 % of the replay).
    return args.model_json_schema()


__all__ = ["Db", "EffectRefused", "NoEffect", "Tool"]

"""What a tool is here: ``@tool`` on a function of the tools' database and typed arguments.

Each tool's first parameter, ``db``, is the tools' database, bound once where the worker is
made (worker.py: ``bind={"db": ...}``); a side-effecting one runs as a ``tower.effects``
tool (claim, fence, record: Tower's, in the same transaction as its own write)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from tower import EffectRefused, tool
from tower.effects import EffectCall, NoEffect


class Db(Protocol):
    """The tools' database as a tool sees it, on SQLite (``sqlite3.Connection``) or on
    PostgreSQL (``tower.effects.Postgres``'s connection): ``?`` placeholders on both; a
    row reads as ``row[0]``, ``row["column"]`` and ``dict(row)``. Write SQL both take:
    ``INSERT ... RETURNING id`` (not ``lastrowid``), ``ON CONFLICT DO NOTHING``."""

    def execute(self, sql: str, params: Sequence[Any] = ..., /) -> Any: ...

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]], /) -> Any: ...


__all__ = ["Db", "EffectCall", "EffectRefused", "NoEffect", "tool"]

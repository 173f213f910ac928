"""What a SQL migration does, one statement at a time, named by a real parser (sqlglot).

A tool deciding whether a migration needs an approval calls ``findings`` on the statements
*as its database will execute them* (split by the database's own rules), so each executed
unit is judged whole: a comment or a string literal cannot hide a statement, and a finding
names the statement's kind and object (``DROP TABLE customers``), not its first line.

The check allows, never guesses: what it does not recognise as harmless is a finding. A
statement the parser cannot read, reads as more than one statement, or reads as something
it has no rule for (a trigger, ``REPLACE``, ``ATTACH``, a pragma) is flagged as unknown and
treated as destructive, so it is never shown to an approver as harmless.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

# ALTER TABLE actions that keep every row and value: adding or renaming.
_KEEPING_ALTERS = (exp.ColumnDef, exp.AlterRename, exp.RenameColumn)


@dataclass(frozen=True)
class Action:
    """One statement as the parser read it.

    Attributes:
        index: its position in the script, from 1.
        what: its kind and object, e.g. ``DROP TABLE customers``; for a statement the
            check cannot name, ``UNKNOWN statement 3: ...``.
        destructive: it can lose data, or the check cannot tell (unknown counts as
            destructive).
    """

    index: int
    what: str
    destructive: bool


def actions(statements: Sequence[str], *, dialect: str = "sqlite") -> list[Action]:
    """Every statement, in order, named by kind and object and judged destructive or not.

    Args:
        statements: the script's statements as the database will execute them, one each.
        dialect: sqlglot's name for the database's SQL dialect.
    """
    _quiet_parser()
    return [_action(i, text, dialect) for i, text in enumerate(statements, 1)]


class _NoStatementText(logging.Filter):
    """sqlglot logs a warning quoting each statement it keeps as an opaque Command: that
    text is a run's (hostile: escape sequences into a log) and such a statement is already
    a finding here (unknown), so the warning is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "unsupported syntax" not in record.getMessage()


def _quiet_parser() -> None:
    log = logging.getLogger("sqlglot")
    if not any(isinstance(f, _NoStatementText) for f in log.filters):
        log.addFilter(_NoStatementText())


def findings(statements: Sequence[str], *, dialect: str = "sqlite") -> list[str]:
    """What an approver must see before these statements run: one line per statement that
    can lose data or that the check cannot read (empty: every statement keeps all data)."""
    return [a.what for a in actions(statements, dialect=dialect) if a.destructive]


def _action(index: int, text: str, dialect: str) -> Action:
    try:
        parsed = [e for e in sqlglot.parse(text, read=dialect) if e is not None]
    except (SqlglotError, ValueError, RecursionError):
        return _unknown(index, "does not parse as SQL")
    if len(parsed) != 1:
        return _unknown(index, f"reads as {len(parsed)} statements, not one")
    return _named(index, parsed[0], dialect) or _unknown(
        index, "not a statement the check knows to keep data")


def _unknown(index: int, why: str) -> Action:
    return Action(index, f"UNKNOWN statement {index}: {why}; treated as destructive", True)


def _named(index: int, e: exp.Expr, dialect: str) -> Action | None:
    """The statement's kind and object, or None if the check has no rule for it."""

    def name(table: exp.Expr | None) -> str:
        return table.sql(dialect=dialect) if table is not None else "?"

    if isinstance(e, exp.Drop):
        tables = ", ".join(name(t) for t in e.args.get("tables") or [e.this])
        return Action(index, f"DROP {e.args.get('kind') or ''} {tables}".replace("  ", " "),
                      True)
    if isinstance(e, exp.Alter):
        acts = e.args.get("actions") or []
        dropped = [a for a in acts if not isinstance(a, _KEEPING_ALTERS)]
        if not acts or dropped:
            how = "; ".join(a.sql(dialect=dialect) for a in dropped) or "?"
            return Action(index, f"ALTER TABLE {name(e.this)} {how}", True)
        return Action(index, f"ALTER TABLE {name(e.this)}", False)
    if isinstance(e, exp.Delete):
        return Action(index, f"DELETE FROM {name(e.this)}", True)
    if isinstance(e, exp.TruncateTable):
        return Action(index, f"TRUNCATE TABLE {', '.join(name(t) for t in e.expressions)}",
                      True)
    if isinstance(e, exp.Update):  # overwrites values, with or without a WHERE
        every = "" if e.args.get("where") else " (every row: no WHERE)"
        return Action(index, f"UPDATE {name(e.this)}{every}", True)
    if isinstance(e, exp.Insert):
        conflict = e.args.get("conflict")
        replaces = str(e.args.get("alternative") or "").upper() == "REPLACE"  # not IGNORE
        if replaces or e.args.get("overwrite") or (
                conflict is not None and "UPDATE" in conflict.sql(dialect=dialect).upper()):
            return Action(index, f"INSERT INTO {name(e.this)}, overwriting rows", True)
        return Action(index, f"INSERT INTO {name(e.this)}", False)
    if isinstance(e, exp.Create):
        kind = e.args.get("kind") or ""
        if kind.upper() in ("TABLE", "INDEX", "VIEW"):
            target = e.this.this if isinstance(e.this, exp.Schema) else e.this
            if kind.upper() == "INDEX" and isinstance(target, exp.Index):
                target = target.this
            return Action(index, f"CREATE {kind.upper()} {name(target)}", False)
        return None
    if isinstance(e, exp.Select):
        return Action(index, "SELECT", False)
    return None

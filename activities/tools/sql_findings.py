"""What a migration script does to the data, followed statement by statement (SQLite).

``findings(statements)`` reads the statements as SQLite will execute them (one each) and
returns one line per statement that can lose or move data, for the DBA who approves it:

- Tables and columns are named by the name they had *before the script ran*, with what
  the script did to the name so far: ``DROP TABLE customers (renamed to legacy_notes at
  statement 2)``. One the script made says so: ``tmp (created at statement 1)``.
- A rename is a finding of its own: a later statement may drop the object by its new name.
- DROP, ``ALTER TABLE … DROP COLUMN``, DELETE, UPDATE and TRUNCATE lose data;
  ``INSERT … SELECT`` and ``CREATE TABLE … AS`` copy it (``copying from customers``);
  ``INSERT OR REPLACE`` and upserts overwrite rows.
- A statement it has no rule for, or cannot read, is ``statement N not understood: …``:
  never passed as harmless.

A tokenizer (comments dropped; a string or quoted name is one token, so nothing in it is
read as SQL) and a walker with one small rule per kind of statement. It knows only the
script, not the database: a name the script has not touched is a table that was there.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise

# SQLite's own lexical rules: only ASCII whitespace; a quote left open is an error.
_TOKEN = re.compile(r"""
    (?P<skip>[ \t\n\v\f\r]+|--[^\n]*|/\*.*?(?:\*/|\Z))
  | (?P<str>'(?:[^']|'')*')
  | (?P<name>"(?:[^"]|"")*"|`(?:[^`]|``)*`|\[[^\]]*\])
  | (?P<word>[A-Za-z_\x80-\U0010ffff][A-Za-z0-9_$\x80-\U0010ffff]*)
  | (?P<num>[0-9][A-Za-z0-9_.]*)
  | (?P<op>.)
""", re.X | re.S)
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)  # SQLite folds ASCII
# Where a FROM clause ends (a comma before one of these separates no tables).
_END_FROM = {"WHERE", "GROUP", "HAVING", "WINDOW", "ORDER", "LIMIT", "UNION", "EXCEPT",
             "INTERSECT", "RETURNING", "DO"}
_CONFLICT = ("REPLACE", "IGNORE", "ABORT", "FAIL", "ROLLBACK")


class NotUnderstood(Exception):
    """The walker has no rule for the statement, or cannot read it."""


@dataclass(frozen=True)
class Token:
    kind: str  # word, name (quoted), str, num, op
    value: str  # a word as written; a quoted name or a string without its quotes

    def word(self) -> str:
        return self.value.upper() if self.kind == "word" else ""


def tokens(text: str) -> list[Token]:
    """The statement's tokens, comments dropped; raises NotUnderstood on an open quote."""
    out = []
    for m in _TOKEN.finditer(text):
        kind, value = m.lastgroup or "op", m.group()
        if kind == "skip":
            continue
        if kind == "op" and value in "'\"`[":
            raise NotUnderstood("a quote that is never closed")
        if kind == "str" or (kind == "name" and value[0] != "["):
            value = value[1:-1].replace(value[0] * 2, value[0])  # 'it''s', "a ""b"""
        elif kind == "name":
            value = value[1:-1]  # [a name]
        out.append(Token(kind, value))
    return out


def shown(name: str) -> str:
    """A name as a finding shows it: bare if plain, else in double quotes (so a name cannot
    pass for the words around it)."""
    return name if _PLAIN.fullmatch(name) else '"' + name.replace('"', '""') + '"'


@dataclass
class Named:
    """A table or a column, by the name it had first, and what the script did to it."""

    first: str
    notes: list[str] = field(default_factory=list)
    columns: dict[str, Named] = field(default_factory=dict)

    def label(self) -> str:
        notes = self.notes if len(self.notes) < 4 else [  # a bounded line, however many
            self.notes[0], f"{len(self.notes) - 2} more renames", self.notes[-1]]
        return self.first + (f" ({', '.join(notes)})" if notes else "")


# Tables (or a table's columns) by the name they have now: ``customers`` may be the table
# that was ``people`` before the script ran. One the script has not touched was there.
Names = dict[str, Named]


def key(names: Names, name: str) -> str:
    """SQLite's resolution: ``main.x`` is ``x``; a bare ``x`` is the script's TEMP table
    ``x`` if it made one (a table of the database by that name is then ``main.x``)."""
    k = name.translate(_LOWER)
    if k.startswith("main."):
        return k.removeprefix("main.")
    return f"temp.{k}" if not k.startswith("temp.") and f"temp.{k}" in names else k


def lookup(names: Names, name: str) -> Named:
    return names.setdefault(key(names, name), Named(name))


def made(names: Names, name: str, how: str) -> None:
    names[name.translate(_LOWER).removeprefix("main.")] = Named(name, [how])


def renamed(names: Names, old: str, new: str, at: int) -> str:
    """``old``'s label before the rename (to ``new``, in the same schema)."""
    was = key(names, old)
    named = lookup(names, old)
    label = named.label()
    del names[was]
    named.notes.append(f"renamed to {new} at statement {at}")
    names[("temp." if was.startswith("temp.") else "") + new.translate(_LOWER)] = named
    return label


def dropped(names: Names, name: str) -> str:
    label = lookup(names, name).label()
    del names[key(names, name)]
    return label


class Walk:
    """A cursor over one statement's tokens."""

    def __init__(self, toks: list[Token]) -> None:
        self.toks, self.i = toks, 0

    def next(self) -> Token | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, *words: str) -> str:
        """The next keyword if it is one of ``words`` (consumed), else ''."""
        tok = self.next()
        if tok is None or tok.word() not in words:
            return ""
        self.i += 1
        return tok.word()

    def op(self, char: str) -> bool:
        """Consume the punctuation ``char`` if it is next."""
        tok = self.next()
        if tok is None or tok.kind != "op" or tok.value != char:
            return False
        self.i += 1
        return True

    def expect(self, *words: str) -> str:
        return self.take(*words) or self.fail(" or ".join(words))

    def fail(self, wanted: str) -> str:
        tok = self.next()
        if tok is not None and tok.kind == "op" and tok.value == ";":
            raise NotUnderstood("more than one statement in one")
        raise NotUnderstood(f"expected {wanted}, found "
                            + ("the end" if tok is None else shown(tok.value[:40])))

    def name(self) -> str:
        """A table's or column's name, maybe ``schema.name`` (each part quoted if odd)."""
        parts = [self._ident()]
        if self.op("."):
            parts.append(self._ident())
        return ".".join(shown(p) for p in parts)

    def _ident(self) -> str:
        tok = self.next()
        if tok is None or tok.kind not in ("word", "name", "str"):  # SQLite takes 'x' too
            return self.fail("a name")
        self.i += 1
        return tok.value

    def skip_to(self, *words: str) -> None:
        """Past the tokens before ``words`` (or the end) outside parentheses."""
        depth = 0
        while (tok := self.next()) is not None and not (depth == 0 and (
                tok.word() in words or (tok.kind == "op" and tok.value in words))):
            depth += {"(": 1, ")": -1}.get(tok.value, 0) if tok.kind == "op" else 0
            self.i += 1

    def rest(self) -> list[Token]:
        """The tokens left; raises if they hold another statement."""
        rest, self.i = self.toks[self.i:], len(self.toks)
        if any(t.kind == "op" and t.value == ";" for t in rest):
            raise NotUnderstood("more than one statement in one")
        return rest

    def end(self) -> None:
        if self.next() is not None:
            self.fail("the end")


def findings(statements: Sequence[str]) -> list[str]:
    """What an approver must see before these statements run, in order (empty: no statement
    can lose or move data)."""
    tables: Names = {}
    out: list[str] = []
    for n, text in enumerate(statements, 1):
        try:
            toks = tokens(text)
            while toks and toks[-1].kind == "op" and toks[-1].value == ";":
                toks.pop()
            if toks:
                out += statement(Walk(toks), n, tables)
        except NotUnderstood as why:
            out.append(f"statement {n} not understood: {why}; treated as destructive")
    return out


def statement(w: Walk, n: int, tables: Names) -> list[str]:
    """The findings of statement ``n``; ``tables`` follows the names it changes."""
    first = w.take("DROP", "ALTER", "CREATE", "INSERT", "REPLACE", "UPDATE", "DELETE",
                   "TRUNCATE", "SELECT", "VALUES")
    if first == "DROP":
        kind = w.expect("TABLE", "INDEX", "VIEW", "TRIGGER")
        if w.take("IF"):
            w.expect("EXISTS")
        name = w.name()
        w.end()
        return [f"DROP TABLE {dropped(tables, name)}" if kind == "TABLE" else
                f"DROP {kind} {name}"]
    if first == "ALTER":
        return alter(w, n, tables)
    if first == "CREATE":
        return create(w, n, tables)
    if first in ("INSERT", "REPLACE"):
        overwrites = first == "REPLACE" or (w.take("OR") and w.expect(*_CONFLICT)) == "REPLACE"
        w.expect("INTO")
        target, rest = lookup(tables, w.name()).label(), w.rest()
        overwrites = overwrites or any(a.word() == "DO" and b.word() == "UPDATE"
                                       for a, b in pairwise(rest))  # an upsert
        how = [", overwriting rows"] if overwrites else []
        how += [f", copying from {', '.join(src)}"] if (src := sources(rest, tables)) else []
        return [f"INSERT INTO {target}{''.join(how)}"] if how else []
    if first == "UPDATE":
        if w.take("OR"):
            w.expect(*_CONFLICT)
        table = lookup(tables, w.name())
        cols = assigned(w, table)
        every = "" if top_level(w.rest(), "WHERE") else " (every row: no WHERE)"
        return [f"UPDATE {table.label()} SET {', '.join(cols)}{every}"]
    if first == "DELETE":
        w.expect("FROM")
        label = lookup(tables, w.name()).label()
        every = "" if top_level(w.rest(), "WHERE") else " (every row: no WHERE)"
        return [f"DELETE FROM {label}{every}"]
    if first == "TRUNCATE":  # not SQLite's (it fails there), but never harmless
        w.take("TABLE")
        names = [w.name()]
        while w.op(","):
            names.append(w.name())
        w.end()
        return [f"TRUNCATE TABLE {lookup(tables, name).label()}" for name in names]
    if first:  # SELECT, VALUES: they read only
        w.rest()
        return []
    tok = w.toks[0]
    raise NotUnderstood(f"no rule for {shown(tok.value[:40])}")


def alter(w: Walk, n: int, tables: Names) -> list[str]:
    w.expect("TABLE")
    name = w.name()
    table = lookup(tables, name)
    if w.take("RENAME"):
        if w.take("TO"):
            new = w.name()
            w.end()
            return [f"ALTER TABLE {renamed(tables, name, new, n)} RENAME TO {new}"]
        w.take("COLUMN")
        col = w.name()
        w.expect("TO")
        new = w.name()
        w.end()
        return [f"ALTER TABLE {table.label()} RENAME COLUMN "
                f"{renamed(table.columns, col, new, n)} TO {new}"]
    if w.take("ADD"):
        w.take("COLUMN")
        col = w.name()
        w.rest()  # its type and constraints
        made(table.columns, col, f"added at statement {n}")
        return []
    w.expect("DROP")
    w.take("COLUMN")
    col = w.name()
    w.end()
    return [f"ALTER TABLE {table.label()} DROP COLUMN {dropped(table.columns, col)}"]


def create(w: Walk, n: int, tables: Names) -> list[str]:
    temp = w.take("TEMP", "TEMPORARY")
    kind = w.take("TABLE", "VIEW", "INDEX") or (w.take("UNIQUE") and w.expect("INDEX"))
    if not kind:
        tok = w.next()
        raise NotUnderstood("no rule for CREATE " + (shown(tok.value[:40]) if tok else ""))
    exists = bool(w.take("IF"))
    if exists:
        w.expect("NOT")
        w.expect("EXISTS")
    name, rest = w.name(), w.rest()
    if kind != "TABLE":
        return []  # an index or a view keeps every row
    name = f"temp.{name}" if temp else name
    # IF NOT EXISTS on a table the script has not touched may name one that was there.
    if not exists or key(tables, name) in tables:
        made(tables, name, f"created at statement {n}")
    copied = sources(rest, tables) if rest and rest[0].word() == "AS" else []
    return [f"CREATE TABLE {name}, copying from {', '.join(copied)}"] if copied else []


def assigned(w: Walk, table: Named) -> list[str]:
    """The columns an UPDATE's SET clause writes, by their names before the script."""
    w.skip_to("SET")  # past an alias, INDEXED BY
    w.expect("SET")
    cols: list[str] = []
    while True:
        if w.op("("):  # (a, b) = (...)
            names = [w.name()]
            while w.op(","):
                names.append(w.name())
            w.op(")") or w.fail("')'")
        else:
            names = [w.name()]
        cols += [lookup(table.columns, c).label() for c in names]
        w.skip_to(",", "FROM", "WHERE", "RETURNING", "ORDER", "LIMIT")  # the value
        if not w.op(","):
            return cols


def top_level(toks: list[Token], word: str) -> bool:
    """Whether ``word`` is in the statement itself, not inside parentheses."""
    w = Walk(toks)
    w.skip_to(word)
    return w.next() is not None


def sources(toks: list[Token], tables: Names) -> list[str]:
    """The tables a statement reads rows from (FROM and JOIN, subqueries included)."""
    found: list[str] = []
    depth, open_at, want = 0, [-1], False  # the depths of the FROM clauses open
    w = Walk(toks)
    while (tok := w.next()) is not None:
        word = tok.word()
        if tok.kind == "op" and tok.value in "()":
            after = w.toks[w.i + 1].word() if w.i + 1 < len(toks) else ""
            group = want and tok.value == "(" and after not in ("SELECT", "VALUES", "WITH")
            depth += 1 if tok.value == "(" else -1
            open_at = [d for d in open_at if d <= depth] + ([depth] if group else [])
            want = group  # FROM (a JOIN b): a table next
        elif word == "FROM" and w.i > 0 and toks[w.i - 1].word() == "DISTINCT":
            want = False  # a IS DISTINCT FROM b: no table
        elif word == "FROM":
            open_at.append(depth)
            want = True
        elif open_at[-1] == depth and word in _END_FROM:
            open_at.pop()
            want = False
        elif open_at[-1] == depth and (word == "JOIN" or (tok.kind, tok.value) == ("op", ",")):
            want = True
        elif want and tok.kind in ("word", "name", "str"):
            name = w.name()
            if not w.op("("):  # json_each(...) is a function, not a table
                label = lookup(tables, name).label()
                found += [] if label in found else [label]
            else:
                w.i -= 1
            want = False
            continue
        else:
            want = False
        w.i += 1
    return found

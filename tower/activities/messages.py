"""The message store: conversation content lives here, not in the event history.

Content-addressed (a message's ref is the hash of its role, name and content), so
storing a message twice, or again on an activity retry, is harmless. A SQLite file
locally; PostgreSQL when several worker hosts share it (``tower.activities.stores.Sql``). The
workflow only holds refs.

An entry the store does not have, or a store it cannot reach, fails the attempt with a
retryable error (``tower.activities.stores``): another worker may have it, and the
workflow never fails on it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from temporalio import activity

from tower import Message
from tower.activities.stores import Sql, entry_missing, is_url, store_unavailable
from tower.contract.stream import stream_name
from tower.contract.wire import MessageRef, WindowRef, message_ref
from tower.core import window

SCHEMA = """
CREATE TABLE IF NOT EXISTS {messages} (
    ref TEXT PRIMARY KEY, role TEXT NOT NULL, name TEXT, content TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS {windows} (ref TEXT PRIMARY KEY, refs TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS {owners} (owner TEXT NOT NULL, ref TEXT NOT NULL,
    PRIMARY KEY (owner, ref));
CREATE INDEX IF NOT EXISTS {owners}_ref ON {owners} (ref);
"""
SETTING = "TOWER_MESSAGES"
CHUNK = 500  # refs per query: under SQLite's variable limit


def pruned_stub(ref: MessageRef) -> Message:
    """What the model sees instead of a pruned payload."""
    return Message(role=ref.role, name=ref.name, content=(
        f"[{ref.chars}-character output of tool {ref.name} pruned from the context; "
        f"it is kept as message {ref.ref}]"))


class MessageStore:
    """Messages and windows, with the runs that own them (for retention), at ``spec``: a
    SQLite file, or a ``postgresql://`` URL."""

    def __init__(self, spec: str | Path) -> None:
        spec = str(spec)
        # PostgreSQL shares a database with the other stores: prefixed names.
        self.MESSAGES, self.WINDOWS, self.OWNERS = (
            ("tower_messages", "tower_windows", "tower_message_owners") if is_url(spec)
            else ("messages", "windows", "owners"))
        self.db = Sql(spec, SCHEMA.format(messages=self.MESSAGES, windows=self.WINDOWS,
                                          owners=self.OWNERS), lock_id=7246131)

    def __str__(self) -> str:
        return f"message store {self.db}"

    def _write(self, statements: Sequence[tuple[str, Sequence[Sequence[Any]]]]) -> None:
        """Run each ``(sql, rows)`` for every row, all in one transaction."""
        try:
            with self.db.transaction() as execute:
                for sql, rows in statements:
                    for row in rows:
                        execute(sql, row)
        except self.db.errors as exc:
            raise store_unavailable(str(self), exc) from None

    def _query(self, sql: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
        try:
            return self.db.rows(sql, args)
        except self.db.errors as exc:
            raise store_unavailable(str(self), exc) from None

    def close(self) -> None:
        self.db.close()

    def put(self, messages: Sequence[Message]) -> list[MessageRef]:
        return self.put_with_window(messages)[0]

    def put_with_window(
        self, messages: Sequence[Message], window: tuple[MessageRef | None,
                                                         Sequence[MessageRef]] | None = None,
    ) -> tuple[list[MessageRef], WindowRef | None]:
        """Store ``messages`` and, given ``(summary, earlier messages)``, the window that ends
        with them: one transaction (one disk sync) for a whole turn."""
        refs = [message_ref(m) for m in messages]
        rows = [(r.ref, m.role, m.name, m.content) for r, m in zip(refs, messages, strict=True)]
        kept = None
        statements: list[tuple[str, Sequence[Sequence[Any]]]] = [
            (f"INSERT INTO {self.MESSAGES} VALUES (?,?,?,?) ON CONFLICT DO NOTHING", rows)]
        if window is not None:
            summary, context = window[0], [*window[1], *refs]
            kept = _window_row(summary, context)
            statements.append((f"INSERT INTO {self.WINDOWS} VALUES (?,?) "
                               "ON CONFLICT DO NOTHING", [kept[1:]]))
        run = owner()
        if run is not None:  # retention removes what only closed runs own (cleanup.py)
            owned = [r.ref for r in refs] + ([kept[1]] if kept else [])
            statements.append((f"INSERT INTO {self.OWNERS} VALUES (?,?) ON CONFLICT DO NOTHING",
                               [(run, ref) for ref in owned]))
        self._write(statements)
        return refs, kept[0] if kept else None

    def get(self, refs: Sequence[MessageRef]) -> list[Message]:
        """The messages behind ``refs``, in order; a pruned ref loads as its stub."""
        wanted = sorted({r.ref for r in refs if not r.pruned})
        found: dict[str, Message] = {}
        for start in range(0, len(wanted), CHUNK):
            chunk = wanted[start:start + CHUNK]
            rows = self._query(f"SELECT ref, role, name, content FROM {self.MESSAGES} "
                               f"WHERE ref IN ({','.join('?' * len(chunk))})", chunk)
            found.update({row[0]: Message(role=row[1], name=row[2], content=row[3])
                          for row in rows})
        # Every string is hostile, a shared store's rows too: a row whose content is not
        # what its ref hashes is not that message (the store lacks it: retried, never used).
        wrong = [ref for ref, m in found.items() if message_ref(m).ref != ref]
        if wrong:
            raise entry_missing(str(self), f"message {wrong[0]} (its stored content does "
                                "not match its digest)", SETTING)
        missing = [r for r in wanted if r not in found]
        if missing:
            raise entry_missing(str(self), f"message {missing[0]} ({len(missing)} missing)",
                                SETTING)
        return [pruned_stub(r) if r.pruned else found[r.ref] for r in refs]

    def put_window(self, summary: MessageRef | None, context: Sequence[MessageRef]) -> WindowRef:
        """Keep a window (the summary, then the messages); its ref is the hash of the list."""
        window = self.put_with_window([], (summary, context))[1]
        assert window is not None
        return window

    def get_window(self, window: WindowRef) -> tuple[MessageRef | None, list[MessageRef]]:
        """(summary, messages) of a window kept by ``put_window``."""
        rows = self._query(f"SELECT refs FROM {self.WINDOWS} WHERE ref = ?", (window.ref,))
        if not rows:
            raise entry_missing(str(self), f"window {window.ref}", SETTING)
        if _digest(rows[0][0]) != window.ref:
            raise entry_missing(str(self), f"window {window.ref} (its stored list does not "
                                "match its digest)", SETTING)
        body = json.loads(rows[0][0])
        summary = MessageRef.model_validate(body["summary"]) if body["summary"] else None
        return summary, [MessageRef.model_validate(r) for r in body["context"]]

    def owners(self, prefix: str) -> list[str]:
        """The owners (``namespace/workflow id``) under ``prefix`` that own entries."""
        return [row[0] for row in self._query(
            f"SELECT DISTINCT owner FROM {self.OWNERS} WHERE owner >= ? AND owner < ?",
            (prefix, prefix + "\U0010ffff"))]

    def forget(self, run: str) -> None:
        """Remove what ``run`` owns: its ownership, then each message and window no other
        owner holds. Idempotent."""
        refs = f"SELECT ref FROM {self.OWNERS} WHERE owner = ?"
        unowned = f"ref IN ({refs}) AND ref NOT IN (SELECT ref FROM {self.OWNERS} " \
            "WHERE owner <> ?)"
        self._write([(f"DELETE FROM {self.MESSAGES} WHERE {unowned}", [(run, run)]),
                     (f"DELETE FROM {self.WINDOWS} WHERE {unowned}", [(run, run)]),
                     (f"DELETE FROM {self.OWNERS} WHERE owner = ?", [(run,)])])


def owner() -> str | None:
    """``namespace/workflow id`` of the run whose activity is storing (None outside one)."""
    if not activity.in_activity():
        return None
    info = activity.info()
    return stream_name(info.workflow_namespace or info.namespace, info.workflow_id or "")


def _window_row(summary: MessageRef | None, context: Sequence[MessageRef],
                ) -> tuple[WindowRef, str, str]:
    refs = [*([summary] if summary else []), *context]
    body = json.dumps({"summary": summary.model_dump() if summary else None,
                       "context": [r.model_dump() for r in context]}, sort_keys=True)
    ref = _digest(body)
    return WindowRef(ref=ref, messages=len(refs), tokens=window.estimate_tokens(refs)), ref, body


def _digest(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()[:32]

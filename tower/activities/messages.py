"""The message store: conversation content lives here, not in the event history.

Content-addressed (a message's ref is the hash of its role, name and content), so
storing a message twice, or again on an activity retry, is harmless. SQLite
locally; any key-value database in production: the workflow only holds refs.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path

from temporalio.exceptions import ApplicationError

from tower import Message
from tower.activities.wal import wal
from tower.contract.wire import MessageRef, WindowRef
from tower.core import window

SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    ref TEXT PRIMARY KEY, role TEXT NOT NULL, name TEXT, content TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS windows (ref TEXT PRIMARY KEY, refs TEXT NOT NULL);
"""


def ref_of(message: Message) -> MessageRef:
    digest = hashlib.sha256(
        f"{message.role}\x00{message.name or ''}\x00{message.content}".encode()).hexdigest()
    # 128 bits: collision-free for any realistic store, and half the bytes in the history.
    return MessageRef(ref=digest[:32], role=message.role, name=message.name,
                      chars=len(message.content))


def pruned_stub(ref: MessageRef) -> Message:
    """What the model sees instead of a pruned payload."""
    return Message(role=ref.role, name=ref.name, content=(
        f"[{ref.chars}-character output of tool {ref.name} pruned from the context; "
        f"it is kept as message {ref.ref}]"))


class MessageStore:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.executescript(SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(str(self.path), timeout=30)
        wal(db)
        return db

    def put(self, messages: Sequence[Message]) -> list[MessageRef]:
        return self.put_with_window(messages)[0]

    def put_with_window(
        self, messages: Sequence[Message], window: tuple[MessageRef | None,
                                                         Sequence[MessageRef]] | None = None,
    ) -> tuple[list[MessageRef], WindowRef | None]:
        """Store ``messages`` and, given ``(summary, earlier messages)``, the window that ends
        with them: one transaction (one disk sync) for a whole turn."""
        refs = [ref_of(m) for m in messages]
        rows = [(r.ref, m.role, m.name, m.content) for r, m in zip(refs, messages, strict=True)]
        kept = None
        if window is not None:
            summary, context = window[0], [*window[1], *refs]
            kept = _window_row(summary, context)
        db = self._connect()
        try:
            with db:
                db.executemany("INSERT OR IGNORE INTO messages VALUES (?,?,?,?)", rows)
                if kept is not None:
                    db.execute("INSERT OR IGNORE INTO windows VALUES (?,?)", kept[1:])
        finally:
            db.close()
        return refs, kept[0] if kept else None

    def get(self, refs: Sequence[MessageRef]) -> list[Message]:
        """The messages behind ``refs``, in order; a pruned ref loads as its stub."""
        wanted = sorted({r.ref for r in refs if not r.pruned})
        db = self._connect()
        try:
            found: dict[str, Message] = {}
            for start in range(0, len(wanted), 500):  # stay under SQLite's variable limit
                chunk = wanted[start:start + 500]
                rows = db.execute(
                    f"SELECT ref, role, name, content FROM messages WHERE ref IN "
                    f"({','.join('?' * len(chunk))})", chunk).fetchall()
                found.update({row[0]: Message(role=row[1], name=row[2], content=row[3])
                              for row in rows})
        finally:
            db.close()
        missing = [r for r in wanted if r not in found]
        if missing:
            # Retrying cannot bring a message back: fail the call, name what is missing.
            raise ApplicationError(f"message store {self.path} has no message {missing[0]}"
                                   f" ({len(missing)} missing)", type="MessageNotFound",
                                   non_retryable=True)
        return [pruned_stub(r) if r.pruned else found[r.ref] for r in refs]

    def put_window(self, summary: MessageRef | None, context: Sequence[MessageRef]) -> WindowRef:
        """Keep a window (the summary, then the messages); its ref is the hash of the list."""
        window = self.put_with_window([], (summary, context))[1]
        assert window is not None
        return window

    def get_window(self, window: WindowRef) -> tuple[MessageRef | None, list[MessageRef]]:
        """(summary, messages) of a window kept by ``put_window``."""
        db = self._connect()
        try:
            row = db.execute("SELECT refs FROM windows WHERE ref = ?", (window.ref,)).fetchone()
        finally:
            db.close()
        if row is None:
            raise ApplicationError(f"message store {self.path} has no window {window.ref}",
                                   type="MessageNotFound", non_retryable=True)
        body = json.loads(row[0])
        summary = MessageRef.model_validate(body["summary"]) if body["summary"] else None
        return summary, [MessageRef.model_validate(r) for r in body["context"]]


def _window_row(summary: MessageRef | None, context: Sequence[MessageRef],
                ) -> tuple[WindowRef, str, str]:
    refs = [*([summary] if summary else []), *context]
    body = json.dumps({"summary": summary.model_dump() if summary else None,
                       "context": [r.model_dump() for r in context]}, sort_keys=True)
    ref = hashlib.sha256(body.encode()).hexdigest()[:32]
    return WindowRef(ref=ref, messages=len(refs), tokens=window.estimate_tokens(refs)), ref, body

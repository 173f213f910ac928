"""The inbox's server-side sessions and receipts, without a server (sign-in limits:
test_inbox_limits.py)."""

from __future__ import annotations

from pathlib import Path

from tower.cli.inbox.identity import InboxStore


def test_a_session_counts_only_while_the_store_keeps_it(tmp_path: Path) -> None:
    store = InboxStore(tmp_path / "inbox.sqlite")
    sid = store.open_session("acme", "alice", 3600)
    assert store.session_user("acme", sid) == "alice"
    assert store.session_user("other", sid) is None  # another tenant's inbox
    assert store.session_user("acme", sid + "x") is None
    assert store.session_user("acme", None) is None
    assert sid not in (tmp_path / "inbox.sqlite").read_bytes().decode(errors="replace")
    # Across a restart (same file) it still counts; revoked, it is gone for every process.
    again = InboxStore(tmp_path / "inbox.sqlite")
    assert again.session_user("acme", sid) == "alice"
    again.close_session(sid)
    assert store.session_user("acme", sid) is None
    expired = store.open_session("acme", "alice", -1)
    assert store.session_user("acme", expired) is None


def test_a_receipt_is_shown_only_to_the_approver_who_decided() -> None:
    store = InboxStore()
    rid = store.keep_receipt("acme", "alice", {"run": "r-1", "verdict": "approve"})
    assert store.receipt("acme", "alice", rid) == {"run": "r-1", "verdict": "approve"}
    assert store.receipt("acme", "bob", rid) is None
    assert store.receipt("other", "alice", rid) is None

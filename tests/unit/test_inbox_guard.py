"""The inbox's sign-in limits and server-side sessions, without a server (a fake clock)."""

from __future__ import annotations

from pathlib import Path

from tower.cli.inbox.guard import InboxStore, SignInLimits


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_five_failures_lock_the_name_for_the_window_and_then_it_opens() -> None:
    clock = Clock()
    limits = SignInLimits(clock=clock)
    for _ in range(5):
        assert limits.wait("alice", "10.0.0.1") == 0
        limits.failed("alice", "10.0.0.1")
        clock.now += 10
    assert limits.wait("alice", "10.0.0.1") == 15 * 60 - 50  # the first failure leaves then
    assert limits.wait("alice", "10.0.0.2") > 0  # from anywhere: it is the name that is locked
    assert limits.wait("bob", "10.0.0.1") == 0  # others are not
    clock.now += 15 * 60 - 50
    assert limits.wait("alice", "10.0.0.1") == 0


def test_a_success_clears_the_names_failures_but_not_the_addresss() -> None:
    limits = SignInLimits(clock=Clock())
    for i in range(4):
        limits.failed("alice", "10.0.0.1")
        limits.failed(f"user{i}", "10.0.0.1")
    limits.succeeded("alice")
    limits.failed("alice", "10.0.0.1")
    assert limits.wait("alice", "10.0.0.1") == 0  # 1 failure since the success
    # The address has 9: a sign-in to one's own account does not reset it.
    for i in range(11):
        limits.failed(f"other{i}", "10.0.0.1")
    assert limits.wait("carol", "10.0.0.1") > 0 and limits.wait("carol", "10.0.0.9") == 0


def test_a_spray_of_names_cannot_grow_memory_without_bound() -> None:
    limits = SignInLimits(clock=Clock(), most_keys=100)
    for i in range(1000):
        limits.failed(f"name{i}", f"10.0.{i // 250}.{i % 250}")
    assert len(limits._failures) <= 100


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

"""The inbox's sign-in limits without a server (a clock the test moves): they slow a
guesser down and can never lock a user out (issue 30, attack 6)."""

from __future__ import annotations

import pytest

from tower.cli.inbox.limits import SignInLimits


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def flood(limits: SignInLimits, clock: Clock, name: str, address: str, n: int) -> None:
    """``n`` failed sign-ins as fast as the limits let them fail, a tenth of a second apart
    (refused attempts in between are not failures)."""
    for _ in range(n):
        clock.now += max(0.1, limits.wait(name, address))
        limits.failed(name, address)


def test_a_flood_for_one_name_from_one_address_never_locks_that_name_out() -> None:
    clock = Clock()
    limits = SignInLimits(clock=clock)
    flood(limits, clock, "alice", "10.0.0.1", 1000)
    assert limits.wait("alice", "10.0.0.2") == 0  # from another address: at once
    assert 0 < limits.wait("alice", "10.0.0.1") <= 30  # here: after a bounded delay
    assert limits.wait("bob", "10.0.0.3") == 0
    clock.now += 30
    assert limits.wait("alice", "10.0.0.1") == 0


def test_the_first_failures_are_free_then_each_doubles_the_wait_up_to_the_cap() -> None:
    clock = Clock()
    limits = SignInLimits(clock=clock)
    waits = []
    for _ in range(12):
        limits.failed("alice", "10.0.0.1")
        waits.append(limits.wait("alice", "10.0.0.1"))
    assert waits == [0, 0, 0, 0, 1, 2, 4, 8, 16, 30, 30, 30]
    clock.now += 15 * 60 + 1  # forgotten a quarter of an hour after the last failure
    limits.failed("alice", "10.0.0.1")
    assert limits.wait("alice", "10.0.0.1") == 0


def test_an_address_spraying_names_slows_down_for_every_name_but_boundedly() -> None:
    clock = Clock()
    limits = SignInLimits(clock=clock)
    for i in range(25):
        limits.failed(f"user{i}", "10.0.0.1")
    assert 0 < limits.wait("carol", "10.0.0.1") <= 30
    assert limits.wait("carol", "10.0.0.9") == 0


def test_a_success_clears_its_pair_but_not_the_address() -> None:
    limits = SignInLimits(clock=Clock())
    for _ in range(19):
        limits.failed("alice", "10.0.0.1")
    limits.succeeded("alice", "10.0.0.1")
    assert limits.wait("alice", "10.0.0.1") == 0
    limits.failed("mallory", "10.0.0.1")  # the address's 20th failure
    assert limits.wait("alice", "10.0.0.1") > 0


def test_a_spray_of_names_cannot_grow_memory_or_flush_the_address_count() -> None:
    limits = SignInLimits(clock=Clock(), most_keys=100)
    for i in range(1000):
        limits.failed(f"name{i}", "10.0.0.1")
    assert len(limits._counts) <= 100
    assert limits.wait("carol", "10.0.0.1") > 0  # the address's count survived the spray


def test_a_delay_of_a_minute_or_more_is_refused() -> None:
    with pytest.raises(ValueError, match="under a minute"):
        SignInLimits(most_delay=15 * 60)

"""The inbox's sign-in limits without a server (a clock the test moves): they slow a
guesser down, can never lock a user out (issue 30, attack 6), and cannot be aimed at a
colleague (issue 37, item 5)."""

from __future__ import annotations

import pytest

from tower.cli.inbox.identity import SignInLimits


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


def trickle(limits: SignInLimits, clock: Clock, name: str, address: str,
            seconds: float) -> list[float]:
    """An attacker failing as ``name`` from ``address`` again the moment each wait ends, for
    ``seconds``; the times it failed at."""
    times, end = [], clock.now + seconds
    while clock.now < end:
        clock.now += limits.wait(name, address)
        limits.failed(name, address)
        times.append(clock.now)
        clock.now += 0.001
    return times


@pytest.mark.parametrize("target", ["eve", "alice"])
def test_another_names_failures_never_delay_a_sign_in_from_the_same_address(
    target: str,
) -> None:
    """The trickle (issue 37, item 5): from the address dave shares, where 20 names failed
    already (a spray), the attacker re-fails as soon as each wait ends; dave, at any
    moment, waits 0 s. Bound in docs/inbox.md: 2 s."""
    clock = Clock()
    limits = SignInLimits(clock=clock)
    for i in range(20):
        limits.failed(f"user{i}", "10.0.0.1")
    flood(limits, clock, target, "10.0.0.1", 5)
    start = clock.now
    while clock.now < start + 135:
        trickle(limits, clock, target, "10.0.0.1", 1)
        assert limits.wait("dave", "10.0.0.1") == 0
        assert limits.wait(target, "10.0.0.1") > 0  # the attacker is still slowed
    # dave's own failures slow dave, and only him: the attacker's count is its own.
    flood(limits, clock, "dave", "10.0.0.1", 6)
    assert 0 < limits.wait("dave", "10.0.0.1") <= 2
    limits.succeeded("dave", "10.0.0.1")
    assert limits.wait("dave", "10.0.0.1") == 0


def test_a_spray_of_names_cannot_grow_memory_or_flush_a_guessed_names_count() -> None:
    clock = Clock()
    limits = SignInLimits(clock=clock, most_keys=100)
    flood(limits, clock, "alice", "10.0.0.1", 12)
    for i in range(1000):
        limits.failed(f"name{i}", "10.0.0.1")
    assert len(limits._counts) <= 100
    assert limits.wait("alice", "10.0.0.1") > 0  # alice's count survived the spray


def test_a_delay_of_a_minute_or_more_is_refused() -> None:
    with pytest.raises(ValueError, match="under a minute"):
        SignInLimits(most_delay=15 * 60)

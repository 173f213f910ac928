"""How fast the inbox lets anyone guess passwords, without letting anyone lock a user out.

A limit per name alone is a lockout: whoever knows an approver's name can keep the name
refused from everywhere, the right password included. So failures count per (name,
address) and per address, and each count only slows its key down: past a few free
failures, every further one doubles a delay, up to ``most_delay`` seconds (under a minute).
A flood of wrong passwords for alice from one address leaves alice free to sign in from
any other address at once, and from that address after at most ``most_delay`` seconds;
the guesser gets a few tries a minute per address.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

NAME_CHARS = 100  # a name longer than any account's counts as its first 100 characters


@dataclass
class _Count:
    failures: int
    last: float


@dataclass
class SignInLimits:
    """Failed sign-ins per (name, address) and per address, each with a bounded backoff.

    After ``free_pair`` failures of one name from one address (``free_address`` from one
    address, any names: colleagues share an office's address), each further failure there
    waits ``first_delay`` seconds, doubling up to ``most_delay``. Attempts refused while
    waiting are not failures: they cannot push the wait further. A count is forgotten
    ``forget_after`` seconds after its last failure. A success clears its (name, address)
    count, not its address's: signing in to one's own account between guesses at another
    resets nothing.
    """

    free_pair: int = 5
    free_address: int = 20
    first_delay: float = 1.0
    most_delay: float = 30.0
    forget_after: float = 15 * 60
    clock: Callable[[], float] = time.monotonic
    most_keys: int = 10_000
    _counts: dict[tuple[str, ...], _Count] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 < self.first_delay <= self.most_delay < 60:
            raise ValueError("sign-in delays must be positive and under a minute: a longer "
                             "one locks users out")

    def wait(self, user: str, address: str) -> float:
        """Seconds before ``user`` may try again from ``address`` (0: now)."""
        now = self.clock()
        return max(self._wait(self._pair(user, address), self.free_pair, now),
                   self._wait(("address", address), self.free_address, now))

    def failed(self, user: str, address: str) -> None:
        now = self.clock()
        for key in (self._pair(user, address), ("address", address)):
            count = self._counts.pop(key, None)
            if count is None or now - count.last > self.forget_after:
                count = _Count(0, now)
            count.failures, count.last = count.failures + 1, now
            self._counts[key] = count  # the latest last: a spray forgets its oldest first
        if len(self._counts) > self.most_keys:
            self._forget(now)

    def succeeded(self, user: str, address: str) -> None:
        self._counts.pop(self._pair(user, address), None)

    def delay(self, failures: int, free: int) -> float:
        """The wait after ``failures`` failures of a key allowed ``free`` of them."""
        if failures < free:
            return 0.0
        # Capped before it is raised to a power: a million failures is still most_delay.
        return min(self.most_delay, self.first_delay * 2.0 ** min(failures - free, 32))

    def _wait(self, key: tuple[str, ...], free: int, now: float) -> float:
        count = self._counts.get(key)
        if count is None or now - count.last > self.forget_after:
            return 0.0
        return max(0.0, count.last + self.delay(count.failures, free) - now)

    @staticmethod
    def _pair(user: str, address: str) -> tuple[str, ...]:
        return ("pair", user[:NAME_CHARS], address)

    def _forget(self, now: float) -> None:
        # Bounded memory under a spray of names: drop the stale, then the oldest.
        for key in [k for k, c in self._counts.items() if now - c.last > self.forget_after]:
            del self._counts[key]
        while len(self._counts) > self.most_keys:
            del self._counts[next(iter(self._counts))]

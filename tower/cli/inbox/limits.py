"""How fast the inbox lets anyone guess passwords, without letting anyone lock a user out.

A limit that one account's failures trip for another can be aimed at a colleague. A limit
per name alone is a lockout: whoever knows an approver's name keeps the name refused from
everywhere. A limit per address (colleagues share an office's address, everyone a reverse
proxy's) is one too: whoever fails again each time its wait ends keeps it refused for
everyone there. So failures count per (name, address) only, and each count slows only its
own key: past a few free failures, every further one doubles a delay, up to
``most_delay`` seconds (under a minute). Another account's failures delay a sign-in by
nothing, from any address; a flood of wrong passwords for alice from one address leaves
alice free to sign in from any other address at once, and from that one within
``most_delay`` seconds; a guesser gets a few tries a minute per name and address.
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
    """Failed sign-ins per (name, address), each with a bounded backoff.

    After ``free`` failures of one name from one address, each further failure there
    makes the next attempt wait ``first_delay`` seconds, doubling up to ``most_delay``.
    Attempts refused while waiting are not failures: they cannot push the wait further. A
    count is forgotten ``forget_after`` seconds after its last failure; a success clears
    it.
    """

    free: int = 5
    first_delay: float = 1.0
    most_delay: float = 30.0
    forget_after: float = 15 * 60
    clock: Callable[[], float] = time.monotonic
    most_keys: int = 10_000
    _counts: dict[tuple[str, str], _Count] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 < self.first_delay <= self.most_delay < 60:
            raise ValueError("sign-in delays must be positive and under a minute: a longer "
                             "one locks users out")

    def wait(self, user: str, address: str) -> float:
        """Seconds before ``user`` may try again from ``address`` (0: now)."""
        now = self.clock()
        count = self._counts.get(self._key(user, address))
        if count is None or now - count.last > self.forget_after:
            return 0.0
        return max(0.0, count.last + self.delay(count.failures) - now)

    def failed(self, user: str, address: str) -> None:
        now, key = self.clock(), self._key(user, address)
        count = self._counts.get(key)
        if count is None or now - count.last > self.forget_after:
            count = self._counts[key] = _Count(0, now)
        count.failures, count.last = count.failures + 1, now
        if len(self._counts) > self.most_keys:
            self._forget(now)

    def succeeded(self, user: str, address: str) -> None:
        self._counts.pop(self._key(user, address), None)

    def delay(self, failures: int) -> float:
        """The wait after ``failures`` failures of one name from one address."""
        if failures < self.free:
            return 0.0
        # Capped before it is raised to a power: a million failures is still most_delay.
        return min(self.most_delay, self.first_delay * 2.0 ** min(failures - self.free, 32))

    @staticmethod
    def _key(user: str, address: str) -> tuple[str, str]:
        return (user[:NAME_CHARS], address)

    def _forget(self, now: float) -> None:
        # Bounded memory under a spray of names: drop the stale, then the counts with the
        # fewest failures (oldest first), a tenth at a time. A spray of new names, one
        # failure each, cannot flush the count of a name guessed at many times.
        for key in [k for k, c in self._counts.items() if now - c.last > self.forget_after]:
            del self._counts[key]
        excess = len(self._counts) - self.most_keys
        if excess > 0:
            least = sorted(self._counts, key=lambda k: (self._counts[k].failures,
                                                        self._counts[k].last))
            for key in least[:excess + self.most_keys // 10]:
                del self._counts[key]

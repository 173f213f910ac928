"""A stream store that stops answering costs its watchers events, never the run: one
warning when publishing fails, one line when it works again, and meanwhile at most one try
every ``RETRY_SECONDS`` (a reply is not held up by connection attempts).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from tower.activities.stores import why_unreachable

log = logging.getLogger("tower.streams")
RETRY_SECONDS = 2.0


class Outage:
    """The state of publishing to one stream store, shared by every publisher of a process."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._since: float | None = None  # when publishing started to fail
        self._tried = 0.0
        self.dropped = 0

    def publish(self, work: Callable[[], object], events: int = 1) -> None:
        """Run ``work`` (an append of ``events`` events) unless the store is down and was tried
        less than RETRY_SECONDS ago; never raises."""
        now = time.monotonic()
        with self._lock:
            if self._since is not None and now - self._tried < RETRY_SECONDS:
                self.dropped += events
                return
            self._tried = now
        try:
            work()
        except Exception as exc:  # noqa: BLE001  (watchers lose events; the run does not)
            with self._lock:
                self.dropped += events
                first, self._since = self._since is None, self._since or now
            if first:
                log.warning("stream store %s: not published: %s; its events are dropped "
                            "until it answers (watchers miss them, runs go on)",
                            _name(self.store), why_unreachable(exc))
            return
        with self._lock:
            since, dropped, self._since, self.dropped = self._since, self.dropped, None, 0
        if since is not None:
            log.warning("stream store %s answers again after %.0f s; %d events were not "
                        "published", _name(self.store), now - since, dropped)


_OUTAGES: dict[int, Outage] = {}
_GUARD = threading.Lock()


def outage_of(store: Any) -> Outage:
    """The one ``Outage`` of ``store`` in this process."""
    with _GUARD:
        found = _OUTAGES.get(id(store))
        if found is None or found.store is not store:
            found = _OUTAGES[id(store)] = Outage(store)
        return found


def _name(store: Any) -> str:
    from tower.activities.stores import redact

    return redact(str(getattr(store, "url", None) or getattr(store, "path", None) or store))

"""What a client call refuses, in one line a user can act on.

Kept free of heavy imports: the CLI's error printer recognises these by name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # `tower --help` loads this module, and no contract types
    from tower.contract.refusals import RefusalCode


class ClientError(Exception):
    """What was asked cannot be done; the message says why (and what to do)."""


class RunNotFound(ClientError):
    """No run of that id in this namespace."""


class DecisionRefused(ClientError):
    """The run refused the decision; nothing changed. ``code`` says why (read it, never
    the words of ``reason``); None only from a run too old to send one."""

    def __init__(self, reason: str, *, code: RefusalCode | None = None) -> None:
        super().__init__(reason)
        self.reason, self.code = reason, code

    @property
    def unknown_key(self) -> bool:
        """Signed with a key the run's roster did not have when it judged it."""
        return self.code == "unknown_key"  # RefusalCode.UNKNOWN_KEY (a StrEnum)


class RunClosed(ClientError):
    """The run closed while a call waited on it: ``status`` is how (the execution's status:
    FAILED, TERMINATED, ...), ``reason`` why."""

    def __init__(self, run: str, status: str, reason: str | None) -> None:
        super().__init__(f"run {run!r} ended {status}" + (f": {reason}" if reason else ""))
        self.run, self.status, self.reason = run, status, reason


class ReplyMissing(ClientError):
    """A reply recorded once (an update's ``reply_ref``) is neither in the message store
    this client can read nor in the run's history (whose text would hash to the ref).
    Worth asking again: another worker may store it yet, or a fixed setting reach it."""


class RunUnreadable(ClientError):
    """What run ``run`` holds cannot be read (its state, cost, steps): the message says
    why, in one inert line (``why`` may hold a worker's or a requester's words). Not the
    asker's mistake: the CLI exits 1 on it."""

    def __init__(self, run: str, why: str) -> None:
        from tower.contract.render import inert  # (pure, light: `tower --help` stays so)

        super().__init__(f"run {inert(run)} {inert(why)}")
        self.run = run


class NeverStarted(RunUnreadable):
    """The run failed before its first step: its agent refused its input (a raw start
    with a value that is not the agent's input). ``reason`` is the run's own words, as
    recorded (a requester's text may be in them)."""

    def __init__(self, run: str, reason: str) -> None:
        super().__init__(run, f"never started: its input was refused ({reason})")
        self.reason = reason

"""What a client call refuses, in one line a user can act on."""

from __future__ import annotations

from tower.contract.failures import Code, DecisionRefused, TowerError

__all__ = ["ClientError", "DecisionRefused", "ReplyMissing", "RunClosed", "RunNotFound"]


class ClientError(TowerError):
    """What was asked cannot be done; the message says why (and what to do)."""

    CODE = Code.CLIENT_ERROR


class RunNotFound(ClientError):
    """No run of that id in this namespace."""

    CODE = Code.RUN_NOT_FOUND


class RunClosed(ClientError):
    """The run closed while a call waited on it: ``status`` says how, ``reason`` why."""

    CODE = Code.RUN_CLOSED

    def __init__(self, run: str, status: str, reason: str | None) -> None:
        super().__init__(f"run {run!r} ended {status}" + (f": {reason}" if reason else ""))
        self.run, self.status, self.reason = run, status, reason


class ReplyMissing(ClientError):
    """A reply recorded once is neither in the message store this client reads nor in the
    run's history: worth asking again (another worker may store it yet)."""

    CODE = Code.REPLY_MISSING


class RunUnreadable(ClientError):
    """What run ``run`` holds cannot be read; ``why`` in one inert line (it may hold a
    worker's or a requester's words). Not the asker's mistake: the CLI exits 1."""

    def __init__(self, run: str, why: str) -> None:
        from tower.contract.render import inert  # (pure, light: `tower --help` stays so)

        super().__init__(f"run {inert(run)} {inert(why)}")
        self.run = run


class NeverStarted(RunUnreadable):
    """The run failed before its first step: its agent refused its input; ``reason`` is the
    run's own words, as recorded."""

    def __init__(self, run: str, reason: str) -> None:
        super().__init__(run, f"never started: its input was refused ({reason})")
        self.reason = reason

"""Errors a user can act on, and how each becomes one `error: ...` line (exit code 2).
Free of heavy imports: `tower --help` loads this module."""

from __future__ import annotations

import sys

from tower.client.errors import ClientError
from tower.contract.failures import TowerError

# What a client call refuses is said to the user as it is.
CliError = ClientError


def user_error(exc: BaseException) -> str | None:
    """The line to print for ``exc``, or None when it is a bug (shown as a traceback)."""
    if isinstance(exc, CliError | ValueError):
        return str(exc)
    if isinstance(exc, OSError) and exc.filename is not None:
        # A path the user chose or can fix (an unwritable folder, a missing parent).
        return f"{exc.filename}: {exc.strerror or exc}"
    # A payload this process cannot decrypt, or one its payload store lacks.
    if (unreadable := _in_chain(exc, "CodecError") or _in_chain(exc, "PayloadMissing")) is not None:
        return f"cannot read the run's payloads: {unreadable}"
    # A payload over the size threshold, and its store does not answer.
    if (down := _in_chain(exc, "PayloadStoreUnavailable")) is not None:
        return f"{down}; try again when it answers"
    if isinstance(exc, TowerError):  # Tower's own errors are written for the user
        return str(exc)
    if "temporalio.service" in sys.modules:
        from temporalio.service import RPCError, RPCStatusCode

        if isinstance(exc, RPCError) and exc.status == RPCStatusCode.UNAVAILABLE:
            return f"the Temporal server stopped answering ({exc})"
        if isinstance(exc, RPCError):
            return f"the Temporal server refused the request: {exc}"
    return None


def _in_chain(exc: BaseException, name: str) -> BaseException | None:
    """The exception of class ``name`` in ``exc``'s chain of causes, if any."""
    seen: BaseException | None = exc
    while seen is not None:
        if type(seen).__name__ == name:
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


"""The checker's worker: the real ``worker.py`` with ``issue_refund`` held to a 2 s timeout
and 2 attempts, so a database locked for a few seconds straddles the tool's timeouts and
its give-up (a trial lasts seconds, not the production minute). Everything else is as
shipped."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses

from activities.tools import TOOLS

TOOL_TIMEOUT_SECONDS = 2.0
TOOL_ATTEMPTS = 2


def shorten() -> None:
    TOOLS["issue_refund"] = dataclasses.replace(
        TOOLS["issue_refund"], timeout_seconds=TOOL_TIMEOUT_SECONDS, attempts=TOOL_ATTEMPTS)


if __name__ == "__main__":
    shorten()
    import worker  # after shorten(): the worker registers the tools as they are now

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(worker.main())

"""What a model endpoint does with a streaming request, found out on every request.

The gateway asks to stream (with ``stream_options`` for the usage) when a run's stream is
watched. Not every OpenAI-compatible server does, and one that did not may the next time
(a proxy in front of several servers, a gateway restarted with new settings): one may
answer a streaming request with a whole JSON completion (read whole), or refuse the
streaming with a 400. A 400 is asked again once without the streaming options; if that
is refused too, the call fails with the server's own words. Nothing is remembered: each
request asks to stream, so what one answer said never decides how later calls are asked.
"""

from __future__ import annotations

import sys

from tower.contract.failures import Code, TowerError


def refuses_streaming(exc: BaseException) -> bool:
    """A 400 (or 422) to a streaming request: maybe the streaming, so ask once plainer."""
    openai = sys.modules.get("openai")
    return (openai is not None and isinstance(exc, openai.APIStatusError)
            and exc.status_code in (400, 422))


class EmptyReply(TowerError):
    """The server answered with no text, no tool call and no refusal."""

    CODE = Code.EMPTY_REPLY

    def __init__(self, model: str, base_url: str | None) -> None:
        where = base_url or "the OpenAI default endpoint"
        super().__init__(f"the server returned an empty reply (model {model} at {where})")

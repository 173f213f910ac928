"""Pure rules of the model activity: which errors are worth retrying, what Retry-After
asks for, and the ordered fallback list (a model, optionally at its own endpoint).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from tower.contract.render import inert
from tower.contract.wire import AGENT_HEADER, NODE_HEADER  # noqa: F401  (re-exported)

if TYPE_CHECKING:  # imported by the first real model call: a worker on the scripted model,
    import openai  # or one that has made none yet, starts without it (40% of a start-up)

# Sent with every request so a gateway's logs (and the loopback server) can tell
# which agent and node asked.
# A gateway asking for more than this gets it capped: the run's own budget decides.
MAX_RETRY_AFTER = 300.0
# How much of a server's own words about an error a failure shows.
SAID_CHARS = 300


class Verdict(StrEnum):
    RETRY = "retry"  # transient: try the next model now, this one again later
    SKIP = "skip"  # this model cannot serve (not found, out of quota): the next one might
    REJECT = "reject"  # the request itself is wrong: no model and no retry will help


@dataclass(frozen=True)
class Endpoint:
    model: str
    base_url: str | None = None  # None: the configured OPENAI_BASE_URL


def parse_models(entries: list[str]) -> list[Endpoint]:
    """``["gpt-4o-mini", "llama3@http://127.0.0.1:11434/v1"]`` -> endpoints, in order."""
    out = []
    for entry in entries:
        model, sep, url = entry.strip().partition("@")
        if not model or (sep and not url.startswith(("http://", "https://"))):
            raise ValueError(f"bad model entry {entry!r}: use NAME or NAME@http(s)://HOST/v1")
        out.append(Endpoint(model, url or None))
    return out


def classify(exc: BaseException) -> Verdict:
    openai = sys.modules.get("openai")  # not imported yet: the error cannot be one of its own
    if openai is not None and isinstance(exc, openai.RateLimitError):
        return Verdict.SKIP if _code(exc) == "insufficient_quota" else Verdict.RETRY
    if openai is not None and isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        if status >= 500 or status in (408, 409):
            return Verdict.RETRY
        return Verdict.SKIP if status == 404 else Verdict.REJECT
    # Timeouts, dropped connections, garbled bodies (JSON, validation): the endpoint's trouble.
    return Verdict.RETRY


def retry_after(exc: BaseException | None) -> float | None:
    """Seconds the server asked us to wait (Retry-After / retry-after-ms), capped."""
    response = getattr(exc, "response", None)
    if response is None:
        return None
    headers = response.headers
    try:
        if headers.get("retry-after-ms"):
            seconds = float(headers["retry-after-ms"]) / 1000
        elif headers.get("retry-after"):
            seconds = float(headers["retry-after"])
        else:
            return None
    except ValueError:
        return None  # an HTTP date: rare from model APIs; fall back to our backoff
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def brief(exc: BaseException) -> str:
    status = getattr(exc, "status_code", None)
    name = type(exc).__name__
    if not status:
        return f"{name}: {str(exc)[:120]}"
    words = said(exc)
    return f"{name} ({status}): the server said {words}" if words else f"{name} ({status})"


def said(exc: BaseException) -> str:
    """The server's own words about an error (its body's message, else its body): hostile,
    so cut to ``SAID_CHARS``, inert and in double quotes, never mistakable for Tower's own;
    "" when it said nothing."""
    body = getattr(exc, "body", None)
    words = body.get("message") if isinstance(body, dict) else body
    if not isinstance(words, str) or not words.strip():
        return ""
    cut = "…" if len(words) > SAID_CHARS else ""
    return '"' + inert(words[:SAID_CHARS]).replace('"', '\\"') + '"' + cut


def _code(exc: openai.APIStatusError) -> str | None:
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error", body)
    return error.get("code") if isinstance(error, dict) else None

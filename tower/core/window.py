"""Context management on message refs: when to reduce, what to summarise, what to prune.
Pure, on refs' metadata, never content, so it runs in the workflow. An agent reaches it as
``from tower import window``.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from tower.contract.wire import MessageRef, Reduction, WindowRef  # noqa: F401  (tower.window)

PRUNED_TOKENS = 30  # what a pruned payload's one-line stub costs in the context


class WindowPolicy(BaseModel):
    max_messages: int = Field(20, ge=2, le=1000)  # reduce when the context has more
    max_tokens: int = Field(4000, ge=100)  # ... or is estimated to be larger than this
    keep_recent: int = Field(6, ge=1, le=500)  # messages kept verbatim by a reduction
    prune_chars: int = Field(2000, ge=10)  # tool payloads larger than this are pruned


def estimate_tokens(refs: Sequence[MessageRef]) -> int:
    """About four characters a token: enough to decide when to reduce."""
    return sum(PRUNED_TOKENS if r.pruned else r.chars // 4 + 1 for r in refs)


def over_budget(policy: WindowPolicy, messages: int, tokens: int) -> bool:
    """A window of ``messages`` and ``tokens`` (``estimate_tokens``) is due a reduction."""
    return messages > policy.max_messages or tokens > policy.max_tokens


def split(policy: WindowPolicy,
          refs: Sequence[MessageRef]) -> tuple[list[MessageRef], list[MessageRef]]:
    """(older messages to summarise, recent messages to keep)."""
    cut = max(len(refs) - policy.keep_recent, 0)
    # Never keep a tool result without the message that asked for it.
    while 0 < cut < len(refs) and refs[cut].role == "tool":
        cut -= 1
    return list(refs[:cut]), list(refs[cut:])


def prune(policy: WindowPolicy, refs: Sequence[MessageRef]) -> list[MessageRef]:
    """Large tool payloads become stubs; the content stays in the store under its ref."""
    return [r.model_copy(update={"pruned": True})
            if r.role == "tool" and r.chars > policy.prune_chars else r for r in refs]

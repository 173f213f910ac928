"""Model calls on a stored conversation window: the workflow sends one window ref and
gets one back; the messages, summary and list stay in the message store
(the mechanics: tower/core/window.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from tower.contract.wire import MessageRef, ModelReply, ModelRequest
from tower.core import window
from tower.core.state import Message, Usage
from tower.core.window import WindowPolicy

from .messages import MessageStore

Answer = Callable[[ModelRequest], Awaitable[ModelReply]]


def _open(store: MessageStore, request: ModelRequest,
          ) -> tuple[MessageRef | None, list[MessageRef], list[Message]]:
    """(summary, messages' refs, the messages to ask with) of the request's window."""
    summary: MessageRef | None = None
    context = list(request.history)  # a thread started before windows: its refs, once
    if request.window is not None:
        summary, kept = store.get_window(request.window)
        context += kept
    if request.summarise is not None:
        return summary, context, []
    return summary, context, store.get([*([summary] if summary else []), *context])


async def windowed_call(store: MessageStore, request: ModelRequest, answer: Answer) -> ModelReply:
    # SQLite blocks: each phase is one trip off the event loop, the write one transaction.
    summary, context, loaded = await asyncio.to_thread(_open, store, request)
    if request.summarise is not None:
        return await _reduce(store, request, answer, summary, context)
    reply = await answer(request.model_copy(update={
        "messages": [*loaded, *request.messages], "history": [], "window": None}))
    new = list(request.messages) if request.keep else []
    if reply.content and request.keep:
        new.append(Message(role="assistant", content=reply.content))
    _, reply.window = await asyncio.to_thread(store.put_with_window, new, (summary, context))
    return reply


async def _reduce(store: MessageStore, request: ModelRequest, answer: Answer,
                  summary: MessageRef | None, context: list[MessageRef]) -> ModelReply:
    """Summarise the older messages (with the previous summary) into the new summary;
    keep the recent ones, large tool payloads pruned to stubs."""
    assert request.summarise is not None
    policy = WindowPolicy(keep_recent=request.summarise.keep_recent,
                          prune_chars=request.summarise.prune_chars)
    older, recent = window.split(policy, context)
    if older:
        loaded = await asyncio.to_thread(store.get, [*([summary] if summary else []), *older])
        reply = await answer(request.model_copy(update={
            "messages": [*loaded, *request.messages], "history": [], "window": None,
            "summarise": None}))
        (summary,) = await asyncio.to_thread(
            store.put, [Message(role="assistant", content=reply.content or "")])
        # The summary lives in the store; the history only needs to know it was made.
        reply.content = f"summary kept as message {summary.ref} ({summary.chars} characters)"
    else:  # only large payloads to prune: no model call
        reply = ModelReply(model="none", content="nothing older to summarise",
                           usage=Usage())
    reply.window = await asyncio.to_thread(store.put_window, summary, window.prune(policy, recent))
    return reply

"""A model's reply returned from an update, recorded once in the run's history: the model
call's result holds the text already, so the update returns its ref, and
``tower.client.update_while_open`` fills the text back in (checked against the ref)."""

from __future__ import annotations

from typing import Any

from tower.contract.wire import message_ref
from tower.core.state import Message


def stored_reply(text: str, *, from_model: bool = True) -> dict[str, Any]:
    """``StoredReply``'s fields for ``text``. ``from_model``: ``text`` is a model's answer
    this run's history recorded; text the workflow wrote itself travels whole."""
    if from_model and text:
        return {"reply": "", "reply_ref": message_ref(Message(role="assistant", content=text))}
    return {"reply": text}

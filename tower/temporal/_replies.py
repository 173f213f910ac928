"""A model's reply returned from an update, recorded once in the run's history.

The model call's recorded result already holds the reply's text; an update that returned
the text again would record it twice (a chat turn's largest part after the user's own
message). So the update returns the text's ref instead (``StoredReply.reply_ref``);
``tower.client.update_while_open`` fills the text back in from the message store, or from
the run's own history, checking it against the ref's digest.
"""

from __future__ import annotations

from typing import Any

from tower.contract.wire import message_ref
from tower.core.state import Message


def stored_reply(text: str, *, from_model: bool = True) -> dict[str, Any]:
    """``StoredReply``'s fields for ``text``, the reply an update returns.

    Args:
        text: the reply.
        from_model: whether ``text`` is a model's answer this run's history recorded (its
            model call's result; a windowed call keeps it in the message store too). Text
            the workflow wrote itself (a fixed fallback) is in no result: it travels whole.
    """
    if from_model and text:
        return {"reply": "", "reply_ref": message_ref(Message(role="assistant", content=text))}
    return {"reply": text}

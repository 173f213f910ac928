"""A chat turn as `tower chat` sends it: the update, then the reply's text resolved by
``tower.client`` (a reply recorded once comes back as a ref: read from the message store,
else from the run's history, checked against the ref)."""

from __future__ import annotations

from typing import Any

from temporalio.client import Client, WorkflowHandle, WorkflowUpdateStage

from tower.client._replies import resolved
from workflows.chat import ChatAgent, ChatReply, UserMessage


async def say(client: Client, handle: WorkflowHandle[Any, Any], text: str,
              store: str | None = None) -> ChatReply:
    """Send ``text`` to the thread; its reply, with the text in ``reply``."""
    sent = await handle.start_update(ChatAgent.send, UserMessage(text=text),
                                     wait_for_stage=WorkflowUpdateStage.COMPLETED)
    reply: ChatReply = await resolved(client, handle.id, sent.workflow_run_id,
                                      await sent.result(), store=store)
    return reply

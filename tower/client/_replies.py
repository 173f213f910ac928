"""A reply recorded once: the text behind an update's ``StoredReply.reply_ref``, from the
message store when this client reaches it, else from the run's own history (the model
call's result, newest first). Either way it must hash to the ref.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from tower.activities.stores import SHARED, StoreSettings, is_url
from tower.client.errors import ReplyMissing
from tower.contract.messages import Message
from tower.contract.wire import MessageRef, StoredReply, message_ref

if TYPE_CHECKING:
    from tower.activities.messages import MessageStore

_PAGE = 64  # events per page, newest first: a turn's model call is a few events back
_stores: dict[str, MessageStore] = {}  # one per setting and process (a connection each)


async def resolved(client: Client, workflow_id: str, run_id: str | None, result: Any,
                   *, store: str | None = None) -> Any:
    """``result`` with its reply's text filled in when it is a ``StoredReply`` carrying only
    ``reply_ref`` (ReplyMissing when neither the store nor the history has it); any other
    result as it is."""
    if not isinstance(result, StoredReply) or result.reply or result.reply_ref is None:
        return result
    text = await reply_text(client, workflow_id, run_id, result.reply_ref, store=store)
    return result.model_copy(update={"reply": text})


async def reply_text(client: Client, workflow_id: str, run_id: str | None, ref: MessageRef,
                     *, store: str | None = None) -> str:
    """The text behind ``ref``, from the message store (``store``, default the environment's)
    or the run's history, checked against the digest; ReplyMissing when neither has it."""
    spec = store or StoreSettings.from_env().messages
    text, why = await asyncio.to_thread(_from_store, spec, ref)
    if text is None:
        text = await _from_history(client, workflow_id, run_id, ref)
    if text is None:
        raise ReplyMissing(
            f"the reply {ref.ref} of run {workflow_id!r} is neither in the message store "
            f"({why}) nor in the run's history; if its history is there, another worker "
            f"stored it: {SHARED} (TOWER_MESSAGES)")
    return text


def _from_store(spec: str, ref: MessageRef) -> tuple[str | None, str]:
    """(the text, or None and why not) from the message store ``spec``."""
    if not is_url(spec) and not Path(spec).is_file():
        return None, f"no message store at {spec}"  # a client never makes one
    try:
        if spec not in _stores:
            from tower.activities.messages import MessageStore

            _stores[spec] = MessageStore(spec)
        (message,) = _stores[spec].get([ref])  # digest-checked (StoreEntryMissing if not)
    except Exception as exc:  # noqa: BLE001 - unreachable, missing, no driver: the history
        return None, str(exc).split(";")[0]
    if not _matches(message.content, ref):  # (the ref names another role or tool)
        return None, f"its entry for {ref.ref} is not a {ref.role} message"
    return message.content, ""


async def _from_history(client: Client, workflow_id: str, run_id: str | None,
                        ref: MessageRef) -> str | None:
    """The reply from the run's recorded model results, newest first (no worker needed)."""
    token = b""
    execution = WorkflowExecution(workflow_id=workflow_id, run_id=run_id or "")
    while True:
        try:
            page = await client.workflow_service.get_workflow_execution_history_reverse(
                GetWorkflowExecutionHistoryReverseRequest(
                    namespace=client.namespace, execution=execution, maximum_page_size=_PAGE,
                    next_page_token=token))
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:  # (its history is gone: retention)
                return None
            raise
        for event in page.history.events:
            text = await _text_in(client, event, ref)
            if text is not None:
                return text
        token = page.next_page_token
        if not token:
            return None


async def _text_in(client: Client, event: HistoryEvent, ref: MessageRef) -> str | None:
    """The reply in ``event`` (a local activity's marker or an activity's result) when its
    content hashes to ``ref``."""
    if event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
        payloads = event.marker_recorded_event_attributes.details["result"].payloads
    elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
        payloads = event.activity_task_completed_event_attributes.result.payloads
    else:
        return None
    if len(payloads) != 1:
        return None
    try:
        (value,) = await client.data_converter.decode(payloads)
    except Exception:  # noqa: BLE001 - not ours to read (another codec, a missing payload)
        return None
    content = value.get("content") if isinstance(value, dict) else None
    return content if isinstance(content, str) and _matches(content, ref) else None


def _matches(text: str, ref: MessageRef) -> bool:
    return message_ref(Message(role=ref.role, name=ref.name, content=text)).ref == ref.ref

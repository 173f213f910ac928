"""A run parked at a gate publishes what approvers need to visibility: the inbox lists it
by role from search attributes and memo alone, with no worker answering queries."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest
from chatkit import say
from gatekit import decide, new_id, refund_request, wait_pending
from temporalio.api.common.v1 import Memo, Payload, SearchAttributes, WorkflowType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import StartWorkflowExecutionRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.converter import encode_search_attributes

from tower.activities.model import ModelSettings
from tower.cli.approvals import pending_requests
from tower.cli.inbox.visibility import waiting_runs
from tower.client._pending import NotGenuine, pending_of, role_query
from tower.contract import search
from tower.contract.pending import PendingView
from tower.temporal.codec import ENCODING, KEY_ID, new_key
from tower.temporal.payloads import tower_data_converter
from worker import build_worker
from workflows.chat import ChatAgent, ChatConfig, ChatInput
from workflows.refund import RefundAgent


async def _listed(client: Client, roles: list[str], run: str, present: bool) -> list:
    async with asyncio.timeout(30):
        while True:  # visibility is eventually consistent
            found = await waiting_runs(client, roles)
            if any(w.run == run for w in found) == present:
                return found
            await asyncio.sleep(0.2)


async def test_parked_refund_is_listed_for_managers_without_a_worker(
    client: Client, task_queue: str, db_path: Path
) -> None:
    run = new_id("refund-inbox")
    worker = build_worker(client, task_queue=task_queue, db_path=db_path, models=ModelSettings())
    async with worker:
        handle = await client.start_workflow(RefundAgent.run, refund_request(client, run),
                                             id=run, task_queue=task_queue)
        await wait_pending(handle)
    # The worker is gone: nothing answers queries, the inbox still sees the request.
    found = await _listed(client, ["manager"], run, present=True)
    view = next(w.view for w in found if w.run == run)
    assert (view.agent, view.gate, view.role, view.node) == (
        "refund", "refund_review", "manager", "issue_refund")
    assert view.proposal["amount_cents"] == "120000" and view.expires_at > view.requested_at
    assert view.editable == ["amount_cents"]  # what `tower pending` shows
    [field] = view.fields
    assert (field.name, field.type, field.value) == ("amount_cents", "int", 120000)
    assert (field.limit.min, field.limit.max, field.limit.rule) == (1, 120000, "lower only")
    assert run not in [w.run for w in await waiting_runs(client, ["dba"])]
    status, single = await pending_of(client, run)
    assert single == view
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings()):
        info = await wait_pending(handle)
        await decide(client, handle, info["pending"], edits={"amount_cents": 90000})
        await handle.result()
    # Decided: the role and the memo are cleared, the run leaves every inbox.
    await _listed(client, ["manager"], run, present=False)
    described = await handle.describe()
    assert described.typed_search_attributes.get(search.AGENT_GATE_ROLE) == ""
    assert search.PENDING_MEMO not in await described.memo()


async def test_a_request_forged_in_the_start_memo_is_cleared_at_the_first_step(
    client: Client, task_queue: str, db_path: Path
) -> None:
    """Whoever starts a run sets its start memo: mallory starts a chat thread (it has no
    gate) whose memo claims a refund awaiting a DBA. The run's first step replaces the
    memo with its own view (none), so no inbox page or `tower approve` offers the forgery."""
    run = new_id("chat-forged")
    forged = PendingView(gate="refund_review", node="issue_refund", when="before", step=1,
                         role="dba", requested_at=datetime(2026, 12, 1, tzinfo=UTC),
                         expires_at=datetime(2099, 1, 1, tzinfo=UTC), agent="refund",
                         proposal={"amount_cents": "100"})
    handle = await client.start_workflow(
        ChatAgent.run, ChatInput(config=ChatConfig()), id=run, task_queue=task_queue,
        memo={search.PENDING_MEMO: forged.model_dump(mode="json")})
    assert (await pending_of(client, run))[1] == forged  # no worker has run it yet
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings()):
        reply = await say(client, handle, "hi")
        assert reply.reply  # the thread ran its first steps and listens again
        assert await pending_of(client, run) == (WorkflowExecutionStatus.RUNNING, None)
        assert search.PENDING_MEMO not in await (await handle.describe()).memo()
        await handle.terminate("test over")


def test_role_names_are_checked_before_they_reach_the_query() -> None:
    assert role_query([]) is None
    assert role_query(["x' OR 'a'='a"]) is None
    query = role_query(["manager", "dba", "manager"])
    assert query is not None and "IN ('dba', 'manager')" in query


async def test_a_memo_the_inbox_cannot_open_hides_that_run_not_the_inbox(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """mallory starts a run (on a queue no worker polls) with the search attributes of a
    request awaiting a DBA and a memo encrypted under a key nobody holds. The inbox, whose
    client holds the deployment's keys, still lists the real requests; the forgery offers
    nothing (before, opening its memo failed the whole listing for every approver)."""
    keys = {"TOWER_CODEC_KEYS": f"k1={new_key()}"}
    inbox = Client(client.service_client, namespace=client.namespace,
                   data_converter=tower_data_converter(store_dir=tmp_path, env=keys))
    honest = new_id("chat-honest")
    forged_view = PendingView(gate="refund_review", node="issue_refund", when="before", step=1,
                              role="dba", requested_at=datetime(2026, 12, 1, tzinfo=UTC),
                              expires_at=datetime(2099, 1, 1, tzinfo=UTC), agent="refund")
    await inbox.start_workflow(  # a readable (if forged) request, so the listing has one
        ChatAgent.run, ChatInput(config=ChatConfig()), id=honest, task_queue=f"{task_queue}-x",
        memo={search.PENDING_MEMO: forged_view.model_dump(mode="json")},
        search_attributes=TypedSearchAttributes([
            SearchAttributePair(search.AGENT_STATUS, "AWAITING_APPROVAL"),
            SearchAttributePair(search.AGENT_GATE_ROLE, "dba")]))
    run = new_id("refund-forged")
    attributes = SearchAttributes()
    encode_search_attributes(TypedSearchAttributes([
        SearchAttributePair(search.AGENT_STATUS, "AWAITING_APPROVAL"),
        SearchAttributePair(search.AGENT_GATE_ROLE, "dba")]), attributes)
    sealed = Payload(metadata={"encoding": ENCODING, KEY_ID: b"nope"}, data=b"\0" * 40)
    await inbox.workflow_service.start_workflow_execution(StartWorkflowExecutionRequest(
        namespace=client.namespace, workflow_id=run, workflow_type=WorkflowType(name="refund"),
        task_queue=TaskQueue(name=f"{task_queue}-x"), request_id=new_id("r"),
        memo=Memo(fields={search.PENDING_MEMO: sealed}), search_attributes=attributes))
    try:
        found = await _listed(inbox, ["dba"], honest, present=True)
        assert run not in [w.run for w in found]
        # Its own page says why it offers nothing (the inbox answers 404 with the reason).
        with pytest.raises(NotGenuine, match="its memo cannot be decoded"):
            await pending_of(inbox, run)
        # `tower pending` lists neither, and does not crash: no worker of the deployment
        # attested them (tests/test_pending_genuine.py).
        rows = {r["run"]: r for r in await pending_requests(inbox)}
        assert honest not in rows and run not in rows
    finally:
        for handle in (inbox.get_workflow_handle(run), inbox.get_workflow_handle(honest)):
            await handle.terminate("test over")

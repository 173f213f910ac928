"""One interpreter: the in-process runner and a real worker carry out the same core steps
(tower.core.interpreter), so one scripted scenario gives the same transition log in both."""

from __future__ import annotations

from pathlib import Path

from gatekit import decide, in_process_tools, new_id, refund_request, refunds, wait_pending
from temporalio.client import Client

from tower import Message
from tower.activities.model import ModelSettings
from tower.core.engine import Transition
from tower.testing import approve, reject, run_agent
from worker import build_worker
from workflows.refund import RefundAgent, RefundState


def moves(log: list[Transition]) -> list[tuple[int, str, str, str]]:
    # Who approved and the decision's id differ between the two; where the run went, and
    # why in kind, may not.
    return [(t.step, t.source, t.target, t.kind) for t in log]


async def test_a_gated_refund_takes_the_same_moves_in_process_and_on_a_worker(
        client: Client, task_queue: str, db_path: Path, tmp_path: Path) -> None:
    edits = {"amount_cents": 100_000}
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings()):
        run = new_id("refund")
        request = refund_request(client, run)
        handle = await client.start_workflow(RefundAgent.run, request, id=run,
                                             task_queue=task_queue)
        info = await wait_pending(handle)
        await decide(client, handle, info["pending"], edits=edits)
        live = await handle.result()
        live_log = await handle.query("transitions", result_type=list[Transition])
    state = RefundState(messages=[Message(role="user", content=request.message)],
                        limit_cents=live.limit_cents,
                        review_timeout_seconds=live.review_timeout_seconds)
    local = await run_agent(RefundAgent, state, tools=in_process_tools(tmp_path / "t.sqlite"),
                            decisions=[approve("alice", edits=edits)])
    assert moves(local.log) == moves(live_log)
    assert [t.reason.split(" by ")[0] for t in local.log] == [
        t.reason.split(" by ")[0] for t in live_log]
    assert (local.state.status, local.state.amount_cents) == (live.status, live.amount_cents)
    assert refunds(db_path) == [("INV-2004", 100_000)]


async def test_in_process_gates_approve_reject_expire_and_resume(tmp_path: Path) -> None:
    def asked() -> RefundState:
        return RefundState(messages=[Message(role="user", content="Please refund $1,200 on "
                                             "invoice INV-2004")],
                           limit_cents=50_000, review_timeout_seconds=3600)

    tools = in_process_tools(tmp_path / "tools.sqlite")
    # Stopped as the gate opens: the state of a run waiting for a manager.
    waiting = await run_agent(RefundAgent, asked(), tools=tools, expire=False)
    assert waiting.path == ["START", "reason", "issue_refund", "issue_refund"]
    assert waiting.state.status == "AWAITING_APPROVAL"
    assert waiting.state.approvals[-1].status == "pending"
    # Taken up where it waits (as a carried-over run is): approved, paid, confirmed.
    resumed = await run_agent(RefundAgent, waiting.state, tools=tools,
                              decisions=[approve("ann")])
    assert [t.source for t in resumed.log][:1] == ["issue_refund"]
    assert resumed.state.status == "DONE" and resumed.state.refund_id
    assert resumed.state.approvals[-1].status == "approved"
    refused = await run_agent(RefundAgent, waiting.state, tools=tools,
                              decisions=[reject("ann", "no")])
    assert refused.state.approvals[-1].status == "rejected" and not refused.state.refund_id
    expired = await run_agent(RefundAgent, waiting.state, tools=tools)
    assert expired.state.approvals[-1].status == "expired"
    assert "no decision by" in expired.state.approvals[-1].reason

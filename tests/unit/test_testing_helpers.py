"""tower.testing means what it says: ``model={node: ...}`` replaces that node's answers
only, and a script that raises fails at once, naming its node; the example's order script
answers again after a correction."""

from __future__ import annotations

from typing import Any

import pytest

from tower import DONE, Message, ToolCallRequest
from tower.contract.wire import ModelRequest
from tower.testing import run_agent
from workflows.refund import RefundAgent, RefundState

INVOICE = {"invoice": {"id": "INV-2001"}, "refundable_cents": 9_000}


def state() -> RefundState:
    return RefundState(messages=[Message(role="user", content="Refund $50 on INV-2001")],
                       limit_cents=100_000, review_timeout_seconds=60)


def tools() -> dict[str, Any]:
    return {"invoice_balance": INVOICE,
            "issue_refund": lambda args: {"refund_id": "rf_1", **args}}


async def test_model_for_one_node_keeps_the_other_nodes_scripts() -> None:
    planned = [ToolCallRequest(name="issue_refund", arguments={
        "invoice_id": "INV-2001", "amount_cents": 4_200, "reason": "test"})]
    run = await run_agent(RefundAgent, state(), model={"reason": planned}, tools=tools())
    assert run.path == ["START", "reason", "issue_refund", "confirm", DONE]
    assert run.state.amount_cents == 4_200  # the test's answer for reason ...
    # ... and confirm answered by the agent's own script (activities/scripted/refund.py)
    assert run.state.reply.startswith("Your refund of $42.00 has been issued (refund id rf_1)")


async def test_a_script_that_raises_fails_at_once_naming_its_node() -> None:
    def broken(request: ModelRequest) -> str:
        raise KeyError("invoice")

    with pytest.raises(KeyError) as caught:
        await run_agent(RefundAgent, state(), model={"confirm": broken}, tools=tools())
    assert any("node 'confirm'" in note and "broken" in note
               for note in caught.value.__notes__)


async def test_the_order_script_answers_again_after_a_correction() -> None:
    """Under the fault drill's malformed answers the engine feeds the bad answer back; the
    order's confirm script must still find the figures (not parse the correction)."""
    from activities.scripted.order import confirm
    from workflows.order import OrderAgent, OrderState

    answers = iter(["not JSON at all"])

    def malformed_once(request: ModelRequest) -> str:
        return next(answers, None) or confirm(request)

    line = {"sku": "WIDGET-1", "name": "Widget", "quantity": 2, "unit_price": "10.00"}
    run = await run_agent(
        OrderAgent, OrderState(messages=[Message(role="user",
                                                 content="2 x WIDGET-1 to 1 Main St, US")]),
        model={"confirm": malformed_once},
        tools={"reserve_stock": {"ok": True, "reservation_id": "rs_0123456789ab", "lines": [line]},
               "charge_payment": {"status": "paid", "charge_id": "ch_1"},
               "create_shipment": {"shipment_id": "sh_1"}})
    assert run.path[-3:] == ["ship", "confirm", DONE]
    assert "total 21.45 USD, charged as ch_1. Shipment sh_1" in run.state.email

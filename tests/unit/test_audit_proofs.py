"""The transition-log audit checks on a recorded run what the graph's proof promises: no
side-effecting node ran without its gate approving it, no visit past its budget. Pure."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tower import DONE, Message
from tower.core.engine import Kind, advance, move, start
from tower.testing import approve, check_log, run_agent
from workflows.account import AccountAgent, AccountState
from workflows.refund import RefundAgent, RefundState

T0 = datetime(2026, 1, 1, tzinfo=UTC)
PLAN = {"invoice_id": "INV-2004", "amount_cents": 120_000, "planned_cents": 120_000,
        "refund_reason": "r", "refundable_seen": 240_000}
TOOLS: dict[str, Any] = {
    "invoice_balance": {"invoice": {"id": "INV-2004"}, "refundable_cents": 240_000},
    "issue_refund": lambda args: {"refund_id": "rf_1", **args}}


def refund_state(message: str = "Please refund $1,200 on invoice INV-2004") -> RefundState:
    return RefundState(messages=[Message(role="user", content=message)], limit_cents=50_000,
                       review_timeout_seconds=60)


def test_a_log_that_skips_the_gate_is_flagged() -> None:
    m = RefundAgent.machine
    s1, t1 = start(m, refund_state(), at=T0, event_id=1)
    s2, t2 = advance(m, s1, "reason", PLAN, at=T0, event_id=2)  # reason -> issue_refund
    # The runtime bug the audit is for: $1,200 is over the limit, yet issue_refund ran
    # with no request opened, let alone approved.
    s3, t3 = advance(m, s2, "issue_refund", {"refund_id": "rf_1"}, at=T0, event_id=3)
    assert (t3.source, t3.target) == ("issue_refund", "confirm")
    assert check_log(m, [t1, t2], [s1, s2]) == []
    assert check_log(m, [t1, t2, t3], [s1, s2, s3]) == [
        "step 3 (issue_refund -> confirm): issue_refund ran its side-effecting tools without "
        "an approval of gate refund_review",
        "step 3 (issue_refund -> confirm): issue_refund ran before gate refund_review "
        "approved it"]
    assert check_log(m, [t1, t2, t3]) == []  # without the states there is nothing to judge


async def test_approved_or_not_needed_runs_are_sound() -> None:
    approved = await run_agent(RefundAgent, refund_state(), tools=TOOLS,
                               decisions=[approve("ann", edits={"amount_cents": 100_000})])
    assert approved.path[-3:] == ["issue_refund", "confirm", DONE]
    assert check_log(RefundAgent.machine, approved.log, approved.states) == []
    small = await run_agent(RefundAgent, refund_state("Please refund $300 on invoice "
                                                      "INV-2004"), tools=TOOLS)
    assert small.state.approvals == [] and small.path[-2:] == ["confirm", DONE]
    assert check_log(RefundAgent.machine, small.log, small.states) == []


async def test_a_rejected_request_then_a_run_of_the_node_is_flagged() -> None:
    m = RefundAgent.machine
    rejected = await run_agent(RefundAgent, refund_state(), tools=TOOLS, expire=True)
    assert rejected.path[-3:] == ["issue_refund", "decline", DONE]  # expired: declined
    log, states = rejected.log[:-1], rejected.states[:-1]  # up to the expiry's close
    assert log[-1].kind == Kind.GATE and log[-1].target == "decline"
    # Forged: the run goes back into issue_refund after the request expired and pays.
    at = states[-1].model_copy(update={"node": "issue_refund"})
    forged = advance(m, at, "issue_refund", {"refund_id": "rf_1"}, at=T0, event_id=99)
    problems = check_log(m, [*log, forged[1]], [*states, forged[0]])
    assert any("issue_refund ran its side-effecting tools without an approval" in p
               for p in problems), problems


def test_a_visit_past_its_budget_is_flagged() -> None:
    m = AccountAgent.machine
    state, first = start(m, AccountState(), at=T0, event_id=1)
    log, states = [first], [state]
    for _ in range(5):  # reason -> lookup_account -> reason ... six visits of reason
        for source, target in (("reason", "lookup_account"), ("lookup_account", "reason")):
            state, t = move(m, state, source, target, Kind.NODE, "forged", at=T0,
                            event_id=len(log) + 1)
            log.append(t)
            states.append(state)
    budget = m.budget
    assert budget is not None and budget.max_visits == {"reason": 5}
    expected = [f"step {log[-1].step} (lookup_account -> reason): visit 6 of reason, past its "
                "budget of 5"]
    assert check_log(m, log, states) == expected
    assert check_log(m, log) == expected  # counted from the log alone, too

"""refund — a human review gate.

reason → issue_refund → confirm → DONE. Over the limit, a gate holds the run before
``issue_refund``: a manager sees the proposed refund, may lower the amount, approves
or rejects. Rejection and timeout go to ``decline`` (the customer is told why). On
approval the gate re-reads the invoice: if less is refundable now than was approved
(another refund landed meanwhile), the run goes back to ``reason`` instead of paying.
That re-check is advice; the guarantee is the payment tool's: in the refund's own
transaction it refuses more than is refundable, or more than the limit without an
approval for that amount, and it is idempotent by the action's key, so a refund is
issued at most once. A refusal routes back to ``reason`` (less is refundable now) or
to ``decline`` (anything else), never to a payment.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from activities.scripted import refund as scripted
from activities.tools import billing
from tower import (
    DONE,
    AgentState,
    AgentWorkflow,
    EditLimit,
    EffectRefused,
    Gate,
    GateStatus,
    Graph,
    Message,
    NodeContext,
    NodeFailed,
    agent,
    stricter,
)

MAX_TOOL_ROUNDS = 3
DAY = 24 * 3600


class RefundPolicy(BaseModel):
    """The tenant's limits for refunds (policy.json: ``agents.refund``)."""

    limit_cents: int = Field(default=50_000, ge=0, json_schema_extra=stricter("lower"),
                             description="refunds above need a manager's approval")


class RefundRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message: str = Field(min_length=1, max_length=2000,
                         examples=["Please refund $1,200 on invoice INV-2004"])
    limit_cents: int | None = Field(default=None, ge=0,
                                    description="lower the tenant's limit for this run")
    review_timeout_seconds: int = Field(default=2 * DAY, ge=1, le=30 * DAY)


class RefundState(AgentState):
    limit_cents: int
    review_timeout_seconds: int
    invoice_id: str = ""
    amount_cents: int = 0  # editable at the gate (lowered only)
    planned_cents: int = 0
    refund_reason: str = ""
    refundable_seen: int = 0
    refund_id: str = ""
    refused: str = ""  # why the payment tool refused the last attempt ("" if it did not)
    refused_code: str = ""
    reply: str = ""


REASON_PROMPT = (
    "You handle refund requests: read the invoice with invoice_balance, then call "
    "issue_refund with the amount to refund (never more than is refundable), or reply in "
    "plain text when nothing can be refunded."
)
CONFIRM_PROMPT = "Write a short, friendly confirmation of the refund to the customer."


async def reason(ctx: NodeContext, state: RefundState) -> dict[str, object]:
    """Plan the refund: read the invoice, then propose issue_refund (not run here)."""
    convo, new = list(state.messages), []
    for _ in range(MAX_TOOL_ROUNDS):
        answer = await ctx.ask(convo)
        if not answer.tool_calls:
            text = answer.text or ""
            new.append(Message(role="assistant", content=text))
            return {"reply": text, "amount_cents": 0, "planned_cents": 0, "messages": new}
        call = answer.tool_calls[0]
        if call.name == billing.issue_refund.name:
            args = call.arguments
            seen = _refundable(convo, args["invoice_id"])
            new.append(Message(role="assistant", content=f"plan: issue_refund "
                               f"{json.dumps(args, sort_keys=True)}"))
            return {"invoice_id": args["invoice_id"], "amount_cents": args["amount_cents"],
                    "planned_cents": args["amount_cents"], "refund_reason": args["reason"],
                    "refundable_seen": seen, "reply": "", "messages": new}
        result = await ctx.tool(call)
        msg = Message(role="tool", name=call.name, content=json.dumps(result, sort_keys=True))
        convo.append(msg)
        new.append(msg)
    raise NodeFailed(f"reason: no plan after {MAX_TOOL_ROUNDS} rounds")


async def issue_refund(ctx: NodeContext, state: RefundState) -> dict[str, object]:
    """Pay the refund once; the tool checks the run's limit and the gate's approval."""
    try:
        result = await ctx.tool(billing.issue_refund, {
            "invoice_id": state.invoice_id, "amount_cents": state.amount_cents,
            "reason": state.refund_reason})
    except EffectRefused as exc:
        note = Message(role="system", content=f"The refund was not issued: {exc.reason}. "
                       "Plan again from the invoice as it is now.")
        return {"refused": exc.reason, "refused_code": exc.code, "messages": [note]}
    msg = Message(role="tool", name="issue_refund", content=json.dumps(result, sort_keys=True))
    # What was paid: a re-approval of a request already paid gets the first refund back.
    return {"refund_id": result["refund_id"], "amount_cents": result["amount_cents"],
            "refused": "", "refused_code": "", "messages": [msg]}


async def confirm(ctx: NodeContext, state: RefundState) -> dict[str, object]:
    """Draft the message to the customer."""
    answer = await ctx.ask(state.messages)
    text = answer.text or ""
    return {"reply": text, "messages": [Message(role="assistant", content=text)]}


async def decline(ctx: NodeContext, state: RefundState) -> dict[str, object]:
    """Tell the customer why no refund was issued (rejected, or no decision in time)."""
    last = state.approvals[-1] if state.approvals else None
    if state.refused:
        text = f"Your refund could not be issued: {state.refused}."
    elif last is not None and last.status == GateStatus.REJECTED and last.decision is not None:
        why = last.decision.note or "the reviewer declined it"
        text = f"Your refund request was not approved: {why}."
    elif last is not None and last.status == GateStatus.EXPIRED:
        text = ("Your refund request could not be reviewed in time, so no refund was issued; "
                "our billing team will contact you.")
    else:
        text = "Your refund request could not be completed; our billing team will contact you."
    return {"reply": text, "messages": [Message(role="assistant", content=text)]}


def over_limit(state: RefundState) -> bool:
    return state.amount_cents > state.limit_cents


def proposal(state: RefundState) -> Mapping[str, Any]:
    return {"action": "issue_refund", "invoice_id": state.invoice_id,
            "amount_cents": state.amount_cents, "amount": f"${state.amount_cents / 100:,.2f}",
            "limit": f"${state.limit_cents / 100:,.2f}", "reason": state.refund_reason}


def amount_limits(state: RefundState) -> Mapping[str, EditLimit]:
    return {"amount_cents": EditLimit(min=1, max=state.planned_cents, rule="lower only")}


def only_lower(planned: RefundState, edits: Mapping[str, Any]) -> str | None:
    """The approver may lower the amount, never raise it (``planned``: before the edits;
    the engine enforces ``amount_limits`` first)."""
    asked = edits.get("amount_cents", planned.amount_cents)
    if not 0 < asked <= planned.planned_cents:
        return (f"amount_cents may only be lowered: between 1 and {planned.planned_cents} "
                f"(asked {asked})")
    return None


async def still_refundable(ctx: NodeContext, state: RefundState) -> str | None:
    """Re-read the invoice on approval: the approved amount must still be refundable."""
    result = await ctx.tool(billing.invoice_balance, {"invoice_id": state.invoice_id})
    now = int(result.get("refundable_cents", 0))
    if now < state.amount_cents:
        return (f"invoice {state.invoice_id} has ${now / 100:,.2f} refundable now "
                f"(${state.refundable_seen / 100:,.2f} when planned)")
    return None


def after_reason(state: RefundState) -> str:
    return "issue_refund" if state.amount_cents > 0 else DONE


def after_payment(state: RefundState) -> str:
    if state.refund_id:
        return "confirm"
    return "reason" if state.refused_code == "over_refundable" else "decline"


def has_reply(state: RefundState) -> bool:
    return bool(state.reply)


def _refundable(convo: list[Message], invoice_id: str) -> int:
    for m in reversed(convo):
        if m.role == "tool" and m.name == "invoice_balance":
            data = json.loads(m.content)
            if data.get("invoice", {}).get("id") == invoice_id:
                return int(data.get("refundable_cents", 0))
    return 0


GRAPH = (
    Graph("refund", RefundState)
    .node("reason", reason, prompt=REASON_PROMPT, tools=[billing.invoice_balance],
          proposes=[billing.issue_refund])
    .node("issue_refund", issue_refund, tools=[billing.issue_refund, billing.invoice_balance])
    .node("confirm", confirm, prompt=CONFIRM_PROMPT)
    .node("decline", decline)
    .entry("reason")
    .route("reason", after_reason, {"issue_refund": "refund planned", DONE: "nothing to refund"},
           guards={DONE: has_reply})
    .gate("issue_refund", Gate(
        name="refund_review", role="manager",
        timeout=lambda s: timedelta(seconds=s.review_timeout_seconds),
        on_reject="decline", on_timeout="decline", applies=over_limit, proposal=proposal,
        editable=("amount_cents",), check_edits=only_lower, limits=amount_limits,
        recheck=still_refundable, on_stale="reason"))
    .route("issue_refund", after_payment, {"confirm": "refund issued",
                                           "reason": "refused: less is refundable now",
                                           "decline": "refused by the payment tool"})
    .edge("confirm", DONE)
    .edge("decline", DONE)
    .require("issue_refund", after="refund_review")
    .budget(escalate_to="decline", max_visits={"reason": 3})
    .compile()
)


@agent(GRAPH, scripts=scripted.SCRIPTS)
class RefundAgent(AgentWorkflow):
    """Refunds an invoice; amounts over the limit wait for a manager's signed decision."""

    Input = RefundRequest
    Policy = RefundPolicy

    # A flood of signals at the gate must not end the run: it continues-as-new instead.
    carry_while_parked = True

    def start(self, request: RefundRequest) -> RefundState:
        # self.limits: the tenant's policy (its roster loaded with it), lowered by the request.
        return RefundState(messages=[Message(role="user", content=request.message)],
                           limit_cents=self.limits.limit_cents,
                           review_timeout_seconds=request.review_timeout_seconds)

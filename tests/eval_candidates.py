"""Candidate agents for the eval tests: the example's agents with one change each, as a
team would propose it. The example's own files stay as they are.

- ``SupportLoginAccount``: a prompt change — classify now tells the model that login
  problems belong to the account desk (a model that follows its prompt sends them there).
- ``SupportBillingDown``: a bug — the billing desk's node fails.
- ``RefundWideGate``: a graph change — the refund gate opens above a quarter of the limit.
"""

from __future__ import annotations

from temporalio import workflow

from activities.tools import TOOLS
from tower import DONE, Gate, Graph, NodeContext, NodeFailed, agent
from workflows import refund, support
from workflows.refund import RefundAgent, RefundRequest, RefundState
from workflows.support import SupportAgent, SupportRequest, SupportState

LOGIN_IS_ACCOUNT = (support.CLASSIFY_PROMPT + " Login and password problems are ACCOUNT "
                    "questions: the account desk resets access.")


def support_graph(classify_prompt: str, billing: object) -> object:
    return (
        Graph("support", SupportState)
        .node("classify", support.classify, prompt=classify_prompt)
        .node("billing", billing, prompt=support.BILLING_PROMPT,  # type: ignore[arg-type]
              tools=[TOOLS["lookup_invoice"], TOOLS["issue_refund"]],
              ungated=support.GRAPH.nodes["billing"].ungated)
        .node("technical", support.handle, prompt=support.TECHNICAL_PROMPT,
              tools=[TOOLS["search_docs"], TOOLS["create_ticket"]],
              ungated=support.GRAPH.nodes["technical"].ungated)
        .node("account_help", support.handle, prompt=support.ACCOUNT_PROMPT,
              tools=[TOOLS["lookup_account"], TOOLS["update_account"]],
              ungated=support.GRAPH.nodes["account_help"].ungated)
        .entry("classify")
        .route("classify", support.by_category,
               {"billing": "BILLING", "technical": "TECHNICAL", "account_help": "ACCOUNT"})
        .edge("billing", DONE)
        .edge("technical", DONE)
        .edge("account_help", DONE)
        .compile()
    )


@agent(support_graph(LOGIN_IS_ACCOUNT, support.handle),  # type: ignore[arg-type]
       scripts=support.scripted.SCRIPTS)
class SupportLoginAccount(SupportAgent):
    @workflow.run
    async def run(self, request: SupportRequest) -> SupportState:
        return await super().run(request)


async def billing_down(ctx: NodeContext, state: SupportState) -> dict[str, object]:
    raise NodeFailed("billing: the invoice service is unreachable")


@agent(support_graph(support.CLASSIFY_PROMPT, billing_down),  # type: ignore[arg-type]
       scripts=support.scripted.SCRIPTS)
class SupportBillingDown(SupportAgent):
    @workflow.run
    async def run(self, request: SupportRequest) -> SupportState:
        return await super().run(request)


def over_a_quarter(state: RefundState) -> bool:
    return state.amount_cents > state.limit_cents // 4


WIDE_GATE = (
    Graph("refund", RefundState)
    .node("reason", refund.reason, prompt=refund.REASON_PROMPT,
          tools=[TOOLS["invoice_balance"]], proposes=[TOOLS["issue_refund"]])
    .node("issue_refund", refund.issue_refund,
          tools=[TOOLS["issue_refund"], TOOLS["invoice_balance"]])
    .node("confirm", refund.confirm, prompt=refund.CONFIRM_PROMPT)
    .node("decline", refund.decline)
    .entry("reason")
    .route("reason", refund.after_reason,
           {"issue_refund": "refund planned", DONE: "nothing to refund"},
           guards={DONE: refund.has_reply})
    .gate("issue_refund", Gate(
        name="refund_review", role="manager", timeout=refund.GRAPH.gates[
            "issue_refund"].timeout, on_reject="decline", on_timeout="decline",
        applies=over_a_quarter, proposal=refund.proposal, editable=("amount_cents",),
        check_edits=refund.only_lower, limits=refund.amount_limits,
        recheck=refund.still_refundable, on_stale="reason"))
    .route("issue_refund", refund.after_payment, {"confirm": "refund issued",
                                                  "reason": "refused: less is refundable now",
                                                  "decline": "refused by the payment tool"})
    .edge("confirm", DONE)
    .edge("decline", DONE)
    .budget(escalate_to="decline", max_visits={"reason": 3})
    .compile()
)


@agent(WIDE_GATE, scripts=refund.scripted.SCRIPTS)
class RefundWideGate(RefundAgent):
    @workflow.run
    async def run(self, request: RefundRequest) -> RefundState:
        return await super().run(request)

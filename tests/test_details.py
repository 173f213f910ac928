"""The Web UI's current details: a pure rendering of the state, checked without a server."""

from __future__ import annotations

from datetime import UTC, datetime

from tower import AgentState
from tower.contract.decisions import Decision, GateRecord, GateStatus, Verdict
from tower.core.details import budget_used, render_details, start_metadata
from tower.core.engine import Kind, Transition
from tower.core.graph import Graph
from tower.core.state import Status, Usage
from workflows.account import GRAPH as ACCOUNT
from workflows.account import AccountState

AT = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


def test_details_show_state_last_move_budget_and_usage() -> None:
    state = AccountState(step=3, node="reason", visits={"reason": 2, "lookup_account": 1},
                         usage=Usage(calls=1, prompt_tokens=120, completion_tokens=15,
                                     cost_usd=0.0012))
    last = Transition(step=3, source="lookup_account", target="reason", reason="edge", at=AT)
    text = render_details(ACCOUNT, state, last, "account-1")
    assert text.splitlines()[0] == "**account** · state `reason` · RUNNING · step 3"
    assert "last move: lookup_account → reason (` edge `)" in text
    assert "budget used: steps 3 · reason: 2 of 5 visits" in text
    assert "model usage: 1 call · 120 prompt + 15 completion tokens · $0.0012" in text
    assert "approval" not in text and "last error" not in text


def test_a_pending_approval_is_shown_while_the_run_waits() -> None:
    record = GateRecord(gate="refund_review", node="issue_refund", when="before", visit=1,
                        step=2, role="manager", run_id="run-id-1",
                        proposal={"amount": 1200, "note": "`x`"},
                        requested_at=AT, expires_at=AT.replace(hour=11))
    decided = record.model_copy(update={"gate": "older", "status": GateStatus.APPROVED})
    state = AccountState(step=2, node="issue_refund", status=Status.AWAITING_APPROVAL,
                         approvals=[decided, record])
    text = render_details(ACCOUNT, state, None, "refund-7")
    assert "state `issue_refund` · AWAITING_APPROVAL · step 2" in text
    assert "**awaiting approval**: gate `refund_review` (before `issue_refund`) needs role " \
           "**manager**, expires 2026-12-02T11:00:00" in text
    # The proposal whole in a code fence (no "$" math, no Markdown), and a backtick
    # cannot break out of it: the fence is longer than any run of backticks inside.
    assert "```text\ngate refund_review (before issue_refund)\nproposal:\n  amount: 1200\n" \
           "  note: `x`\neditable: -\n```" in text
    assert "` tower approve refund-7 --gate refund_review --by NAME --role manager `" in text
    # Decided requests are history, not pending: listed among the decisions.
    assert "awaiting approval**: gate `older`" not in text
    assert "- gate `older` (before `issue_refund`): **approved** at step 3" in text
    # Once decided, nothing is shown as pending.
    done = state.model_copy(update={"approvals": [decided], "status": Status.RUNNING})
    assert "awaiting approval" not in render_details(ACCOUNT, done)


def test_budget_used_names_every_limit() -> None:
    async def work(ctx: object, state: AgentState) -> dict[str, object]:
        return {}

    machine = (Graph("spend", AgentState).node("work", work).entry("work")
               .edge("work", "DONE")
               .budget(escalate_to="FAILED", max_steps=8, max_tokens=4000, max_cost_usd=0.5)
               .compile())
    state = AgentState(step=2, usage=Usage(calls=2, prompt_tokens=700, completion_tokens=100,
                                           cost_usd=0.0123))
    assert budget_used(machine, state) == "steps 2 of 8 · 800 of 4000 tokens · $0.0123 of $0.5"
    from workflows.support import GRAPH as SUPPORT

    assert budget_used(SUPPORT, AgentState(step=4)) == "steps 4 (no budget)"


def test_errors_show_the_last_one() -> None:
    state = AccountState(step=12, node="FAILED", status=Status.FAILED,
                         errors=["loop budget exceeded (reason visited 5 times)", "boom"])
    assert render_details(ACCOUNT, state).endswith("last error: ` boom `")


# Markdown that would become structure if shown raw: a link, an image, a heading, a list
# item, math, a code fence of its own; an escape sequence, a bidi override, a newline.
HOSTILE = ("[pay here](http://evil.example) ![x](http://evil.example/x.png)\n# Paid\n"
           "- item $x^2$ <b>bold</b>\n```\n\x1b[31mred\u202eevil ``")


def _structure(markdown: str) -> set[str]:
    """The kinds of Markdown structure ``markdown`` holds (CommonMark, as markdown-it reads
    it: rich's own Markdown parser)."""
    from markdown_it import MarkdownIt

    kinds = set()
    for token in MarkdownIt("commonmark").parse(markdown):
        kinds.add(token.type)
        kinds |= {child.type for child in token.children or []}
    return kinds


def test_a_closed_run_shows_its_end_decisions_and_reply_inert() -> None:
    from workflows.refund import GRAPH as REFUND
    from workflows.refund import RefundState

    decision = Decision(
        decision_id="d-1", tenant="default", run="refund-9", gate="refund_review",
        decision=Verdict.APPROVE, approver="[bob](http://evil.example)", role="manager",
        expires_at=AT, note="ok\n# fine", edits={"amount_cents": 50000}, kid="k1", request=4,
        run_id="run-id-1", proposal="sha256:" + "0" * 64)
    record = GateRecord(gate="refund_review", node="issue_refund", when="before", visit=1,
                        step=4, role="manager", run_id="run-id-1", proposal={"amount": 1},
                        requested_at=AT, expires_at=AT.replace(hour=11),
                        status=GateStatus.APPROVED, decision=decision)
    state = RefundState(step=8, node="DONE", status=Status.DONE, limit_cents=100_000,
                        review_timeout_seconds=60, approvals=[record], reply=HOSTILE)
    log = [Transition(step=5, source="issue_refund", target="issue_refund", reason="gate",
                      at=AT.replace(minute=7), kind=Kind.GATE),
           Transition(step=8, source="confirm", target="DONE", reason=HOSTILE, at=AT)]
    text = render_details(REFUND, state, log[-1], "refund-9", log)
    assert text.splitlines()[0] == "**refund** · ended at `DONE` · DONE · step 8"
    # Who, what, when: the step that closed the request and its time from the log.
    assert ("- gate `refund_review` (before `issue_refund`): **approved** by "
            "` [bob](http://evil.example) ` (role ` manager `, signed) at step 5, "
            "2026-12-02T10:07:00") in text
    assert "note ` ok\\n# fine `; edits ` {\"amount_cents\": 50000} `" in text
    # The reply whole, escaped, in a fence longer than its own run of backticks.
    assert ("reply:\n````text\n[pay here](http://evil.example) ![x](http://evil.example/x.png)"
            "\n# Paid\n- item $x^2$ <b>bold</b>\n```\n\\x1b[31mred⟨U+202E⟩evil ``\n````"
            ) in text
    assert "\x1b" not in text and "\u202e" not in text
    # Nothing a run carries became structure: no link, image, heading, list or HTML; only
    # Tower's own bold, code spans, fences and (its own) decisions list.
    kinds = _structure(text)
    assert not kinds & {"link_open", "image", "heading_open", "html_inline", "html_block"}
    assert kinds & {"fence", "code_inline", "strong_open"} == {"fence", "code_inline",
                                                                "strong_open"}
    # The same hostile text raw would have been all of those: the check can see them.
    assert {"link_open", "image", "heading_open"} <= _structure(HOSTILE)


def test_the_start_metadata_names_the_machine_and_keeps_a_hostile_run_id_inert() -> None:
    from workflows.refund import GRAPH as REFUND

    run_id = "r-1`` [x](http://evil.example)\x1b[2J"
    summary, details = start_metadata(REFUND, run_id)
    assert summary.startswith("Tower agent refund: ")
    assert "nodes `reason`, `issue_refund`, `confirm`, `decline`" in details
    assert "- gate `refund_review` before `issue_refund`: role **manager** decides" in details
    assert "``` tower state r-1`` [x](http://evil.example)\\x1b[2J ``` where it is" in details
    assert "\x1b" not in details and "link_open" not in _structure(details)

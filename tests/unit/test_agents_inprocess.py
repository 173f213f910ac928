"""Every shipped agent, in-process: its own scripted answers, its real tools on a scratch
SQLite database, the engine's own transition log and guards — no server, milliseconds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gatekit import in_process_tools, make_shop, schema

from tower import DONE, FAILED, Message, ToolCallRequest
from tower.core.engine import Kind
from tower.core.state import Status
from tower.testing import approve, check_log, reject, run_agent, run_node
from tower.testing._inprocess import Stuck
from workflows.account import AccountAgent, AccountState
from workflows.chat import ChatAgent, ChatState, Turn
from workflows.company import CompanyAgent, CompanyState
from workflows.fanout import FanOutAgent, FanOutState
from workflows.lifecycle import LifecycleAgent, LifecycleState
from workflows.migration import MigrationAgent, MigrationState
from workflows.onboarding import OnboardingAgent, OnboardingState
from workflows.order import OrderAgent, OrderState
from workflows.refund import RefundAgent, RefundState
from workflows.research import ResearchAgent, ResearchState
from workflows.support import SupportAgent, SupportState


@pytest.fixture
def tools(tmp_path: Path) -> dict[str, Any]:
    """The real tools on a fresh database, answering in-process (no activity)."""
    return in_process_tools(tmp_path / "tools.sqlite")


def asks(text: str) -> list[Message]:
    return [Message(role="user", content=text)]


def sound(run: Any, agent: Any) -> None:
    assert check_log(agent.machine, run.log, run.states) == []


async def test_account_answers_from_the_account_it_read(tools: dict[str, Any]) -> None:
    run = await run_agent(AccountAgent, AccountState(messages=asks("Check ACC-1001")),
                          tools=tools)
    assert run.path == ["START", "reason", "lookup_account", "reason", DONE]
    assert [t.kind for t in run.log] == [Kind.NODE, Kind.ROUTE, Kind.NODE, Kind.ROUTE]
    assert "ACC-1001" in run.state.answer
    sound(run, AccountAgent)


async def test_account_loop_ends_on_its_budget_not_forever(tools: dict[str, Any]) -> None:
    run = await run_agent(AccountAgent, AccountState(messages=asks("Check ACC-9999")),
                          tools=tools)
    assert run.path[-2:] == ["error", FAILED] and run.state.status == Status.FAILED
    assert any(t.kind == Kind.BUDGET for t in run.log)
    assert "loop budget exceeded" in run.state.errors[0]
    sound(run, AccountAgent)


async def test_account_bad_model_output_is_corrected_then_fails_the_node() -> None:
    # Three answers that are not FinalAnswer JSON: two corrections, then the node fails.
    run = await run_agent(AccountAgent, AccountState(messages=asks("hi")),
                          model={"reason": ["not json", "still not", "nope"]})
    assert run.path == ["START", "reason", FAILED]
    assert "still invalid after 2 corrections" in run.log[-1].reason
    assert len(run.contexts[0].requests) == 3


async def test_support_routes_in_code_and_a_handler_sees_only_its_tools(
        tools: dict[str, Any]) -> None:
    state = SupportState(messages=asks("I was charged twice on invoice INV-2001"))
    run = await run_agent(SupportAgent, state, tools=tools)
    assert run.path == ["START", "classify", "billing", DONE]
    billing = run.contexts[1].requests[0]
    assert [t.name for t in billing.tools] == ["lookup_invoice", "issue_refund"]
    sound(run, SupportAgent)
    # A model that names another handler's tool is corrected, never obeyed.
    update, ctx = await run_node(SupportAgent, "billing", run.state, tools=tools, model={
        "billing": [ToolCallRequest(name="update_account", arguments={"account_id": "x"}),
                    "Sorry, I can only look at invoices."]})
    assert "not available here" in ctx.requests[1].messages[-1].content
    assert ctx.calls == ["model:scripted-test", "model:scripted-test"]


async def test_refund_over_the_limit_waits_for_a_manager(tools: dict[str, Any]) -> None:
    def state() -> RefundState:
        return RefundState(messages=asks("Please refund $1,200 on invoice INV-2004"),
                           limit_cents=50_000, review_timeout_seconds=3600)

    run = await run_agent(RefundAgent, state(), tools=tools,
                          decisions=[approve("ann", edits={"amount_cents": 100_000})])
    assert run.path == ["START", "reason", "issue_refund", "issue_refund", "issue_refund",
                        "confirm", DONE]
    assert [t.kind for t in run.log[2:4]] == [Kind.GATE, Kind.GATE]
    assert run.state.approvals[0].status == "approved"
    assert run.state.refund_id and run.state.amount_cents == 100_000
    sound(run, RefundAgent)
    rejected = await run_agent(RefundAgent, state(), tools=tools,
                               decisions=[reject("ann", "too much")])
    assert rejected.path[-2:] == ["decline", DONE]
    assert "too much" in rejected.state.reply
    parked = await run_agent(RefundAgent, state(), tools=tools)  # nobody decides: it expires
    assert parked.state.approvals[0].status == "expired" and parked.path[-2:] == ["decline", DONE]
    with pytest.raises(Exception, match="amount_cents may only be lowered"):
        await run_agent(RefundAgent, state(), tools=tools,
                        decisions=[approve("ann", edits={"amount_cents": 999_999})])


async def test_migration_destructive_change_waits_and_applies_once_approved(
        tools: dict[str, Any], tmp_path: Path) -> None:
    make_shop(tmp_path / "tools.sqlite")
    script = "DROP TABLE legacy_notes;"
    state = MigrationState(messages=asks(f"Migration for shop:\n{script}"), database="shop",
                           script=script, review_timeout_seconds=3600)
    run = await run_agent(MigrationAgent, state, tools=tools, decisions=[approve("dba")])
    assert run.path == ["START", "analyze", "apply", "apply", "apply", "report", DONE]
    assert run.state.applied
    assert [t for _, t, _ in schema(tmp_path / "databases" / "shop.sqlite")] == ["customers"]
    sound(run, MigrationAgent)


async def test_order_is_a_fixed_subflow_with_exact_arithmetic(tools: dict[str, Any]) -> None:
    state = OrderState(messages=asks("2 x WIDGET-1 to 1 Main St, Springfield, US"))
    run = await run_agent(OrderAgent, state, tools=tools)
    assert run.path == ["START", "parse", "check_stock", "compute_tax", "charge", "ship",
                        "confirm", DONE]
    sound(run, OrderAgent)


async def test_onboarding_provisions_once_after_both_checks(tools: dict[str, Any]) -> None:
    text = "Hi, I'm Ada Byron from Analytical Engines, e-mail ada@engines.io"
    run = await run_agent(OnboardingAgent, OnboardingState(messages=asks(text)), tools=tools)
    assert run.path == ["START", "collect_info", "validate", "provision", DONE]
    provisioned = [c for ctx in run.contexts for c in ctx.calls if c.startswith("tool:")]
    assert provisioned.count("tool:create_account") == 1
    sound(run, OnboardingAgent)


async def test_research_leaves_a_state_only_when_code_agrees(tools: dict[str, Any]) -> None:
    topic = "durable execution for LLM agents"
    state = ResearchState(topic=topic, messages=asks(f"Research and draft: {topic}"))
    run = await run_agent(ResearchAgent, state, tools=tools)
    assert run.path == ["START", *["research"] * 4, *["draft"] * 4, DONE]
    assert "guard research_done held" in run.log[4].reason
    sound(run, ResearchAgent)


async def test_company_profile_and_a_child_that_stays_invalid_fails() -> None:
    state = CompanyState(company="Acme", messages=asks("Profile the company Acme."))
    run = await run_agent(CompanyAgent, state)
    assert run.path == ["START", "profile", DONE]
    bad = await run_agent(CompanyAgent, state, model={"profile": ["x", "y", "z"]})
    assert bad.path == ["START", "profile", FAILED]


async def test_fanout_maps_children_and_its_reducers_merge_them() -> None:
    async def child(run: Any, request: Any) -> CompanyState:
        if request.company == "Broken":
            return CompanyState(company="Broken", status=Status.FAILED, errors=["boom"])
        return CompanyState(company=request.company, profile=f"{request.company} makes things")

    state = FanOutState(companies=["Acme", "Broken", "Initech"])
    run = await run_agent(FanOutAgent, state, children=child)
    assert run.path == ["START", "research_all", FAILED]  # the default policy: fail
    skip = state.model_copy(update={"policy": state.policy.model_copy(
        update={"on_failure": "skip"})})
    run = await run_agent(FanOutAgent, skip, children=child)
    assert run.path == ["START", "research_all", "report", DONE]
    assert run.state.report.startswith("2 of 3 companies profiled")
    assert run.contexts[0].calls == ["child:0", "child:1", "child:2"]


async def test_chat_answers_the_turns_waiting_in_its_inbox(tools: dict[str, Any]) -> None:
    class Thread:  # what the chat's nodes ask of the run hosting them
        def __init__(self) -> None:
            self.inbox = [Turn(id=1, text="hello"), Turn(id=2, text="search docs login"),
                          Turn(id=3, text="search docs forever")]
            self.replies: dict[int, tuple[str, bool]] = {}
            self.closing = ""

        def publish(self) -> None: ...

        def carry_over_ready(self) -> bool:
            return False

    host = Thread()
    run = await run_agent(ChatAgent, ChatState(), tools=tools, host=host, model={
        "respond": ["Hi!", ToolCallRequest(name="search_docs", arguments={"query": "login"}),
                    "Reset your password.", *[ToolCallRequest(
                        name="search_docs", arguments={"query": "more"})] * 3]})
    assert run.path == ["START", *["listen", "respond"] * 3, "listen"]
    # (text, whether a model wrote it): the update returns a model's reply by its ref (in
    # its call's recorded result), and the text the workflow wrote itself whole.
    assert host.replies == {1: ("Hi!", True), 2: ("Reset your password.", True),
                            3: ("Sorry, I could not finish looking that up.", False)}
    assert isinstance(run.state, ChatState) and run.state.turns == 3
    with pytest.raises(Stuck):  # an empty inbox: the node would wait for a user
        await run_node(ChatAgent, "listen", run.state, host=host)


async def test_lifecycle_moves_only_through_its_guard_table(tools: dict[str, Any]) -> None:
    run = await run_agent(LifecycleAgent, LifecycleState(goal="Check ACC-1001"),
                          tools=tools, events=[{"start": True}])
    assert run.path[:4] == ["START", "IDLE", "PLANNING", "TOOL_CALL"]
    assert run.path[-1] == DONE and all(t.kind == Kind.EVENT for t in run.log[1:])
    sound(run, LifecycleAgent)
    idle = await run_agent(LifecycleAgent, LifecycleState(goal="g"), events=[{"solved": True}])
    assert idle.path == ["START", "IDLE"], "an event no guard admits changes nothing"



async def test_a_refused_edit_raises_the_error_tower_testing_exports(
        tools: dict[str, Any]) -> None:
    from tower.contract.failures import DecisionRefused

    state = RefundState(messages=asks("Please refund $1,200 on invoice INV-2004"),
                        limit_cents=50_000, review_timeout_seconds=3600)
    # The manager may only lower the amount: raising it is refused, as a real run would.
    with pytest.raises(DecisionRefused, match="refuses the scripted decision"):
        await run_agent(RefundAgent, state, tools=tools,
                        decisions=[approve("ann", edits={"amount_cents": 150_000})])

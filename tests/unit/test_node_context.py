"""A node's model sees only the node's tools; anything else it asks for is refused."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel

from tower import Answer
from tower.contract.wire import ModelReply, ToolCallRequest
from tower.core.context import check_reply
from tower.core.graph import Node
from workflows.account import GRAPH as ACCOUNT
from workflows.account import FinalAnswer
from workflows.support import GRAPH as SUPPORT


def ctx(machine_nodes: Mapping[str, Node], node: str) -> Node:
    # Every node context (a worker's, a test's) checks a reply with check_reply.
    return machine_nodes[node]


def test_a_tool_of_another_state_is_refused() -> None:
    billing = ctx(SUPPORT.nodes, "billing")
    reply = ModelReply(model="m", tool_calls=[
        ToolCallRequest(name="update_account", arguments={"account_id": "ACC-1001"})])
    answer: Answer[BaseModel] | None  # no schema: nothing to parse
    answer, problem = check_reply(billing, reply, None)
    assert answer is None
    assert problem == ("tool 'update_account' is not available here "
                       "(available: lookup_invoice, issue_refund)")
    classify = ctx(SUPPORT.nodes, "classify")
    reply = ModelReply(model="m", tool_calls=[ToolCallRequest(name="lookup_invoice")])
    assert "(available: none)" in check_reply(classify, reply, None)[1]


def test_tool_arguments_are_validated_against_the_tool_schema() -> None:
    reason = ctx(ACCOUNT.nodes, "reason")
    reply = ModelReply(model="m", tool_calls=[
        ToolCallRequest(name="lookup_account", arguments={"account_id": "1001"})])
    answer, problem = check_reply(reason, reply, FinalAnswer)
    assert answer is None and problem.startswith("bad arguments for lookup_account: account_id")
    ok = ModelReply(model="m", tool_calls=[
        ToolCallRequest(name="lookup_account", arguments={"account_id": "ACC-1001"})])
    answer, problem = check_reply(reason, ok, FinalAnswer)
    assert answer is not None and answer.tool_calls == ok.tool_calls and problem == ""


def test_structured_answers_must_match_the_schema() -> None:
    reason = ctx(ACCOUNT.nodes, "reason")
    bad, problem = check_reply(reason, ModelReply(model="m", content='{"reply": "x"}'), FinalAnswer)
    assert bad is None and problem.startswith("answer does not match FinalAnswer: answer")
    good, _ = check_reply(reason, ModelReply(model="m", content='{"answer": "fine"}'), FinalAnswer)
    assert good is not None and good.parsed == FinalAnswer(answer="fine")
    assert check_reply(reason, ModelReply(model="m", content=""), None)[1] == "empty answer"

"""The eval's pure parts on the recorded histories: what a recording holds, how a run is
summarised and scored (the model judge on a loopback model server), the report, the
picture. No Temporal server."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

from temporalio.testing import ActivityEnvironment

from tower.activities.model import ModelSettings
from tower.cli.agents import agents
from tower.contract.wire import ModelReply, ModelRequest
from tower.core.pictures import machine_svg
from tower.temporal.replay import load
from tower.testing.evals import Change, EvalReport, Mode, RunResult
from tower.testing.evals.compare import BUILT_IN, gateway_judge, plural, score, transition_diff
from tower.testing.evals.models import RecordedModels
from tower.testing.evals.recording import Recording, RunSummary, ToolCall, chains
from tower.testing.evals.report import load_baseline, markdown, write
from tower.testing.model_server import LoopbackModelServer

HISTORIES = Path(__file__).parents[1] / "histories"


def recording(*names: str) -> list[Recording]:
    return chains(load([HISTORIES / n for n in names]))


def test_a_chain_of_runs_is_one_recording_with_every_message_in_order() -> None:
    chat = recording(*sorted(p.name for p in HISTORIES.glob("chat-1@*.json")))
    assert len(chat) == 1 and len(chat[0].histories) == 2
    assert [m.name for m in chat[0].outside] == ["send"] * 8 + ["close"]
    assert chat[0].input[0].get("carry") is None  # the first run's own input, not a carry


def test_only_decisions_the_recorded_run_took_are_sent_again() -> None:
    # A clerk's decision by signal was refused (wrong role); the manager's update was taken.
    [gated] = recording("gates/refund-gated-1.json")
    decisions = [(m.kind, m.decision and m.decision["sub"], gated.replayable(m))
                 for m in gated.outside]
    assert decisions == [("signal", "carol", False), ("update", "alice", True)]
    assert gated.summary.decisions == 1


def test_a_summary_reads_path_tools_gates_and_answer_from_the_history() -> None:
    [approved] = recording("refund-approved.json")
    s = approved.summary
    assert (s.status, s.node, s.trail) == ("DONE", "DONE",
                                           ["reason", "issue_refund", "confirm", "DONE"])
    assert [t.name for t in s.tool_calls] == ["invoice_balance", "invoice_balance",
                                              "issue_refund"]
    assert (s.gates, s.decisions, s.model_calls) == (["refund_review"], 1, 3)
    assert s.answer.startswith("Your refund of $1,000.00 has been issued")
    assert [c.node for c in approved.model_calls] == ["reason", "reason", "confirm"]
    [parked] = recording("refund-parked.json")
    assert parked.summary.status == "AWAITING_APPROVAL"


def test_ids_a_tool_made_up_compare_by_where_they_came_from() -> None:
    [order] = recording("order-1.json")
    shipment = order.summary.tool_calls[-1]
    assert shipment.arguments["reservation_id"] == "<reserve_stock.reservation_id>"
    # The answer names the charge: read as where it came from.
    assert order.summary.made["ch_5802e1931547"] == "<charge_payment.charge_id>"


def summary(**changes: object) -> RunSummary:
    base = RunSummary(workflow_id="support-2", agent="support", status="DONE", node="DONE",
                      trail=["classify", "technical", "DONE"], answer="Clear cookies.",
                      tool_calls=[ToolCall(name="search_docs", arguments={"query": "login"})])
    return base.model_copy(update=changes)


async def test_verdicts_same_changed_regressed() -> None:
    base = summary()
    assert await score(base, summary(latency_s=9.0), BUILT_IN) == (Change.SAME, [])
    verdict, found = await score(base, summary(trail=["classify", "account_help", "DONE"],
                                               tool_calls=[]), BUILT_IN)
    assert verdict is Change.CHANGED and [s.scorer for s in found] == ["path", "tools"]
    assert found[0].detail.startswith(
        "-classify->technical; -technical->DONE; +classify->account_help; "
        "+account_help->DONE (classify > technical > DONE  =>  classify > account_help > DONE)")
    verdict, found = await score(base, summary(status="FAILED", node="FAILED",
                                               error="boom"), BUILT_IN)
    assert verdict is Change.REGRESSED and "DONE at DONE -> FAILED at FAILED (boom)" in \
        found[0].detail
    # A reworded answer is not a change; another answer is.
    assert await score(base, summary(answer="Clear cookies!"), BUILT_IN) == (Change.SAME, [])
    assert (await score(base, summary(answer="Open a ticket."), BUILT_IN))[0] is \
        Change.CHANGED


async def test_a_plain_function_and_an_async_one_are_scorers() -> None:
    def cost_up(base: RunSummary, cand: RunSummary) -> object:
        from tower.testing.evals import Score
        return Score(scorer="cost", verdict=Change.REGRESSED, detail="dearer") \
            if cand.cost_usd > base.cost_usd * 2 else None

    verdict, found = await score(summary(cost_usd=0.01), summary(cost_usd=0.05),
                                 [cost_up])  # type: ignore[list-item]
    assert verdict is Change.REGRESSED and found[0].detail == "dearer"


async def test_an_id_a_tool_made_up_in_the_answer_is_no_change() -> None:
    made = {"pay_0123456789ab": "<send_payment.id>"}
    base = summary(answer="Paid ACME (pay_0123456789ab).", made=made)
    # The new run's tool made a fresh id, and the answer names it ...
    fresh = {"pay_fedcba987654": "<send_payment.id>"}
    assert await score(base, summary(answer="Paid ACME (pay_fedcba987654).", made=fresh),
                       BUILT_IN) == (Change.SAME, [])
    # ... or the recorded model reply names the recorded run's, though the tool made another.
    assert await score(base, summary(answer=base.answer, made=fresh), BUILT_IN) == (
        Change.SAME, [])
    # An id no tool made is read as written.
    assert (await score(base, summary(answer="Paid ACME (pay_fedcba987654)."), BUILT_IN))[0] \
        is Change.CHANGED


def test_the_report_and_the_picture_of_moved_edges(tmp_path: Path) -> None:
    base, cand = summary(), summary(trail=["classify", "account_help", "DONE"])
    run = RunResult(source="s", workflow_id="support-2", agent="support",
                    verdict=Change.CHANGED, baseline=base, candidate=cand)
    report = EvalReport(mode=Mode.CHANGED, baseline="recorded", runs=[run])
    moved = report.moved()["support"]
    assert moved == {("classify", "technical"): -1, ("technical", "DONE"): -1,
                     ("classify", "account_help"): 1, ("account_help", "DONE"): 1}
    svg = machine_svg(agents()["support"].machine, None, moved)
    assert svg.count('stroke-width="3.2"') == 4 and "+1 visit" in svg and "-1 visit" in svg
    assert machine_svg(agents()["support"].machine, "classify") == machine_svg(
        agents()["support"].machine, "classify", {})  # the inbox's picture is unchanged
    written = write(report, tmp_path, {"support": svg})
    assert [p.name for p in written] == ["report.json", "report.md", "graph-support.svg"]
    assert "![support](graph-support.svg)" in markdown(report, {"support": "graph-support.svg"})
    assert load_baseline(tmp_path)["support-2"].trail == cand.trail
    assert transition_diff(base, base).startswith("classify > technical > DONE  =>")


LOOP = ["reason", "lookup_account"]


def account(rounds: int, end: list[str]) -> RunSummary:
    """An account run that went round its loop ``rounds`` times, then ``end``."""
    return RunSummary(workflow_id="account-1", agent="account", status="DONE", node="DONE",
                      trail=LOOP * rounds + end)


def test_path_diffs_count_each_move() -> None:
    five, one = account(5, ["reason", "DONE"]), account(1, ["reason", "DONE"])
    # The same moves, taken fewer times: four fewer visits of each, nothing removed.
    assert transition_diff(five, one).startswith(
        "reason->lookup_account: 4 fewer visits (5 -> 1); "
        "lookup_account->reason: 4 fewer visits (5 -> 1) (reason > lookup_account > ")
    assert transition_diff(account(1, ["reason", "DONE"]), account(2, ["reason", "DONE"])) \
        .startswith("reason->lookup_account: 1 more visit (1 -> 2); "
                    "lookup_account->reason: 1 more visit (1 -> 2)")
    # A move only one run took: its count when it is more than one.
    escalated = account(5, ["error", "FAILED"])
    assert transition_diff(five, escalated).startswith(
        "lookup_account->reason: 1 fewer visit (5 -> 4); -reason->DONE; "
        "+lookup_account->error; +error->FAILED (")
    assert transition_diff(account(0, ["reason", "DONE"]), one).startswith(
        "+reason->lookup_account; +lookup_account->reason (")
    assert transition_diff(one, account(0, ["reason", "DONE"])).startswith(
        "-reason->lookup_account; -lookup_account->reason (")
    assert transition_diff(account(2, ["reason", "DONE"]), account(0, ["reason", "DONE"])) \
        .startswith("-reason->lookup_account (2 visits); -lookup_account->reason (2 visits) (")
    assert [plural(n, "visit") for n in (0, 1, 2)] == ["0 visits", "1 visit", "2 visits"]
    assert plural(1, "visit", "fewer") == "1 fewer visit"


def test_moves_and_the_picture_count_every_visit_and_show_every_moved_edge() -> None:
    runs = [RunResult(source="s", workflow_id="account-1", agent="account",
                      verdict=Change.CHANGED, baseline=account(5, ["reason", "DONE"]),
                      candidate=account(4, ["error", "FAILED"]))]
    moved = EvalReport(mode=Mode.RECORDED, baseline="recorded", runs=runs).moved()["account"]
    assert moved == {("reason", "lookup_account"): -1, ("lookup_account", "reason"): -2,
                     ("reason", "DONE"): -1, ("lookup_account", "error"): 1,
                     ("error", "FAILED"): 1}
    machine = agents()["account"].machine
    svg = machine_svg(machine, None, {**moved, ("reason", "lookup_account"): -4})
    # The budget's escalation (a dashed red move of its own) is drawn with its count.
    assert svg.count('stroke="#1b7f3b" stroke-width="3.2"') == 2  # error's two moves
    assert svg.count('stroke="#c62828" stroke-width="3.2"') == 3
    assert re.findall(r">([-+]\d+ visits?)\b", svg) == ["-4 visits", "-1 visit", "-2 visits",
                                                         "+1 visit", "+1 visit"]
    # A move to or from a node the machine does not have (a dropped one) is drawn too.
    gone = machine_svg(machine, None, {("reason", "old_check"): -2})
    assert 'data-node="old_check"' in gone and "-2 visits" in gone
    # A gate's timeout: the migration's gate sends an expired request to report.
    migration = agents()["migration"].machine
    timed_out = machine_svg(migration, None, {("apply", "report"): 1})
    assert timed_out.count('stroke="#1b7f3b" stroke-width="3.2"') == 1 and "+1 visit" in \
        timed_out


async def test_the_model_judge_asks_through_the_gateway() -> None:
    def judge_model(request: ModelRequest) -> ModelReply:
        asked = json.loads(request.messages[-1].content)
        worse = "refund" in asked["baseline"] and "refund" not in asked["candidate"]
        verdict = {"verdict": "regressed" if worse else "same", "why": "no refund promised"}
        return ModelReply(model="judge", content=json.dumps(verdict))

    with LoopbackModelServer(replies=judge_model) as server:
        judge = gateway_judge(ModelSettings(api_key="loopback", base_url=server.base_url,
                                            models=["judge"], timeout_seconds=10))
        base = summary(answer="Your refund is on its way.")
        verdict, found = await score(base, summary(answer="Please call us."), [judge])
        assert verdict is Change.REGRESSED and found[0].detail == "no refund promised"
        assert await score(base, summary(answer="Your refund is on the way."), [judge]) == (
            Change.SAME, [])
        assert await score(base, base, [judge]) == (Change.SAME, [])  # equal: not asked
    offline = gateway_judge(ModelSettings())  # the scripted model cannot judge: a change
    assert (await score(base, summary(answer="x"), [offline]))[0] is Change.CHANGED


def test_a_retried_model_call_is_counted_once() -> None:
    """A live call retried (its first attempt timed out) is one call in the eval's count."""
    models = RecordedModels({}, Mode.LIVE)
    request = ModelRequest(agent="support", node="classify", system="s", messages=[])
    first = replace(ActivityEnvironment.default_info(), workflow_id="support-1")
    for attempt in (1, 2, 3):
        env = ActivityEnvironment()
        env.info = replace(first, attempt=attempt)
        assert env.run(models.answer, request) is None  # the live model answers
    env = ActivityEnvironment()
    env.info = replace(first, activity_id="2")  # the node's next call
    env.run(models.answer, request)
    assert models.answered == {"support-1": {"live": 2}}

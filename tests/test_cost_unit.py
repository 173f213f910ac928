"""Cost without a server: the price table, the token/cost budget, the cost report."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tower import DONE, FAILED, AgentState, Graph
from tower.activities.prices import PriceError, PriceTable
from tower.contract.failures import InvalidGraph
from tower.core.engine import advance, start
from tower.core.graph import Machine
from tower.core.pictures import to_mermaid
from tower.core.state import CallUsage, Usage, cost_report

T0 = datetime(2026, 1, 1, tzinfo=UTC)


async def _noop(ctx: object, state: object) -> dict[str, object]:
    return {}


def _machine(**limits: Any) -> Machine:
    return (Graph("spend", AgentState)
            # Each pass spends what the test says: the spend budget, not a visit count,
            # is what ends this loop (graph proofs accept it only when declared).
            .node("work", _noop, unbounded="the spend budget ends it")
            .node("escalate", _noop)
            .entry("work").edge("work", "work").edge("escalate", FAILED)
            .budget(escalate_to="escalate", **limits)
            .compile())


def test_prices_from_inline_json_file_and_prefix() -> None:
    table = PriceTable.from_env({"TOWER_PRICES": '{"gpt-4o-mini": {"prompt": 0.15, '
                                                 '"completion": 0.6}, "gpt-4o": '
                                                 '{"prompt": 2.5, "completion": 10}}'})
    used = Usage(calls=1, prompt_tokens=2000, completion_tokens=500)
    assert table.priced("gpt-4o-mini", used).cost_usd == pytest.approx(0.6)
    # A dated answer is priced by the longest matching name, not by "gpt-4o".
    assert table.priced("gpt-4o-mini-2024-07-18", used).cost_usd == pytest.approx(0.6)
    assert table.priced("gpt-4o-2024-08-06", used).cost_usd == pytest.approx(10.0)
    assert table.priced("scripted", used).cost_usd == 0.0  # unpriced: free


def test_prices_from_file(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text('{"scripted": {"prompt": 1, "completion": 2}}')
    table = PriceTable.from_env({"TOWER_PRICES": str(path)})
    assert table.priced("scripted", Usage(prompt_tokens=1000, completion_tokens=1000)).cost_usd \
        == pytest.approx(3.0)
    assert PriceTable.from_env({}).prices == {}


@pytest.mark.parametrize("value, message", [
    ('{"m": {"prompt": -1, "completion": 1}}', "m.prompt: Input should be greater"),
    ('{"m": {"prompt": 1}}', "m.completion: Field required"),
    ('{"m": {"prompt": 1, "completion": 1, "cached": 1}}', "m.cached: Extra inputs"),
    ('["m"]', "must be a JSON object"),
    ('{"m": ', "not valid JSON"),
    ("/nonexistent/prices.json", "cannot be read"),
])
def test_bad_price_tables_are_refused_clearly(value: str, message: str) -> None:
    with pytest.raises(PriceError, match=message):
        PriceTable.from_env({"TOWER_PRICES": value})


def _run_until_escalation(machine: Machine, per_step: Usage) -> list[tuple[str, str, str]]:
    state, t = start(machine, AgentState(), at=T0, event_id=1)
    moves = [(t.source, t.target, t.reason)]
    while state.node == "work" and len(moves) < 50:
        state, t = advance(machine, state, "work", {"usage": per_step},
                           at=T0, event_id=2)
        moves.append((t.source, t.target, t.reason))
    return moves


def test_token_budget_routes_to_escalation() -> None:
    moves = _run_until_escalation(_machine(max_tokens=1000),
                                  Usage(calls=1, prompt_tokens=300, completion_tokens=100))
    # 400, 800 fit; 1200 does not: the third step escalates instead of looping again.
    assert moves[-1] == ("work", "escalate", "token budget exceeded (1200 tokens > 1000)")
    assert len(moves) == 4


def test_cost_budget_routes_to_escalation_and_records_why() -> None:
    machine = _machine(max_cost_usd=0.05)
    state, _ = start(machine, AgentState(), at=T0, event_id=1)
    state, t = advance(machine, state, "work", {"usage": Usage(calls=1, cost_usd=0.04)},
                       at=T0, event_id=2)
    assert t.target == "work"
    state, t = advance(machine, state, "work", {"usage": Usage(calls=1, cost_usd=0.02)},
                       at=T0, event_id=3)
    assert t.target == "escalate" and "cost budget exceeded ($0.060000 > $0.05)" in t.reason
    assert state.errors == [t.reason]


def test_spend_budget_does_not_block_done() -> None:
    machine = (Graph("finish", AgentState).node("work", _noop).entry("work")
               .edge("work", DONE).budget(escalate_to="work", max_tokens=1).compile())
    state, _ = start(machine, AgentState(), at=T0, event_id=1)
    state, t = advance(machine, state, "work", {"usage": Usage(prompt_tokens=5)}, at=T0,
                       event_id=2)
    assert t.target == DONE  # the work is done; there is nothing left to stop


@pytest.mark.parametrize("limits", [{"max_tokens": 0}, {"max_cost_usd": -1.0}])
def test_nonpositive_spend_budget_is_an_invalid_graph(limits: dict[str, float]) -> None:
    with pytest.raises(InvalidGraph, match="must be positive"):
        _machine(**limits)


def test_budget_is_drawn() -> None:
    text = to_mermaid(_machine(max_tokens=5000, max_cost_usd=0.25))
    assert "note right of escalate: spend budget: ≤ 5000 tokens, ≤ $0.25" in text


def test_cost_report_per_call_node_and_run() -> None:
    a = Usage(calls=1, prompt_tokens=10, completion_tokens=5, cost_usd=0.001)
    b = Usage(calls=1, prompt_tokens=20, completion_tokens=5, cost_usd=0.002)
    state = AgentState(usage=a + b + a, node_usage={"reason": a + a, "reply": b})
    calls = [CallUsage(step=2, node="reason", model="m", usage=a),
             CallUsage(step=3, node="reply", model="m", usage=b),
             CallUsage(step=4, node="reason", model="m", usage=a)]
    report = cost_report(state, calls)
    assert report["run"]["tokens"] == 55 and report["run"]["cost_usd"] == pytest.approx(0.004)
    assert report["nodes"]["reason"]["calls"] == 2 and report["nodes"]["reply"]["tokens"] == 25
    assert [c["step"] for c in report["calls"]] == [2, 3, 4]
    assert sum(c["cost_usd"] for c in report["calls"]) == pytest.approx(report["run"]["cost_usd"])


def test_node_usage_reducer_adds_per_node() -> None:
    from tower.core.state import apply_update
    u = Usage(calls=1, prompt_tokens=3)
    state = apply_update(AgentState(), {"node_usage": {"x": u}})
    state = apply_update(state, {"node_usage": {"x": u, "y": u}})
    assert state.node_usage == {"x": u + u, "y": u}


def test_setup_registers_the_cost_attributes() -> None:
    from tower.cli.server_setup import kind_name, wanted_attributes
    wanted = {name: kind_name(kind) for name, kind in wanted_attributes().items()}
    assert wanted["AgentCostUsd"] == "Double" and wanted["AgentTokens"] == "Int"

"""The recorded gated runs replay against the current code and show what they should."""

from __future__ import annotations

from pathlib import Path

from tower.core.engine import Kind
from tower.testing import assert_replays
from workflows.registry import AGENTS

AGENT_CLASSES = list(AGENTS.values())

HISTORIES = Path(__file__).parent / "histories"
GATES = HISTORIES / "gates"


def moves(log: list) -> list[str]:
    return [f"{t.source}>{t.target}" for t in log]


async def test_gated_histories_replay_with_their_decisions() -> None:
    results = {r.workflow_id: r for r in await assert_replays(GATES, workflows=AGENT_CLASSES)}
    check_gated(results)
    assert "(manager, signed)" in results["refund-gated-1"].log[3].reason


async def test_the_demo_gated_runs_replay_signed_and_parked() -> None:
    runs = [HISTORIES / f"{name}.json" for name in ("refund-approved", "refund-rejected",
                                                     "refund-parked", "migration-approved")]
    results = {r.workflow_id: r for r in await assert_replays(*runs, workflows=AGENT_CLASSES)}
    assert results["refund-parked"].states[-1].status == "AWAITING_APPROVAL"
    assert "approved by alice (manager, signed)" in results["refund-approved"].log[3].reason
    assert "rejected by alice (manager, signed)" in results["refund-rejected"].log[3].reason
    assert results["migration-approved"].states[-1].status == "DONE"


def check_gated(results: dict) -> None:
    approved = results["refund-gated-1"].log
    assert moves(approved) == ["START>reason", "reason>issue_refund",
                               "issue_refund>issue_refund", "issue_refund>issue_refund",
                               "issue_refund>confirm", "confirm>DONE"]
    assert approved[3].update == {"amount_cents": 100000}
    assert "rejected by alice" in results["refund-gated-2"].log[3].reason
    stale = results["migration-gated-1"].log
    assert [t.reason.split(":")[1].split()[0] for t in stale if t.kind == Kind.GATE] == [
        "awaiting", "stale", "awaiting", "approved"]
    assert moves(stale)[-2:] == ["apply>report", "report>DONE"]

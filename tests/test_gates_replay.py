"""The recorded gated runs replay against the current code and show what they should."""

from __future__ import annotations

from pathlib import Path

from starter.testing import assert_replays
from tower import Kind

GATES = Path(__file__).parent / "histories" / "gates"


def moves(log: list) -> list[str]:
    return [f"{t.source}>{t.target}" for t in log]


async def test_gated_histories_replay_with_their_decisions() -> None:
    results = {r.workflow_id: r for r in await assert_replays(GATES)}
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

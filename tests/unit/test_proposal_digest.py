"""The proposal digest a decision names: canonical (key order and whitespace do not
matter), and changed by anything the approver was shown."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from tower.contract.decisions import GateRecord, proposal_digest
from tower.contract.pending import EditLimit

AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def record(**kw: Any) -> GateRecord:
    fields: dict[str, Any] = dict(
        gate="refund_review", node="issue_refund", when="before", visit=1, step=3,
        role="manager", run_id="run-1", requested_at=AT, expires_at=AT,
        proposal={"action": "issue_refund", "invoice_id": "INV-2004", "amount_cents": 120000,
                  "limit": "$500.00", "args": {"a": 1, "b": [1, 2]}},
        editable=["amount_cents"],
        limits={"amount_cents": EditLimit(min=1, max=120000, rule="lower only")})
    return GateRecord(**(fields | kw))


def test_the_same_proposal_in_any_key_order_or_layout_has_one_digest() -> None:
    base = record()
    shuffled = json.loads(json.dumps(base.model_dump(mode="json"), indent=3))
    shuffled["proposal"] = dict(reversed(list(shuffled["proposal"].items())))
    shuffled["proposal"]["args"] = {"b": [1, 2], "a": 1}
    again = GateRecord.model_validate_json(json.dumps(shuffled, indent=1))
    assert proposal_digest(again) == proposal_digest(base)
    assert proposal_digest(base).startswith("sha256:") and len(proposal_digest(base)) == 71
    # Not part of what is shown: when, how often, by whom it is decided.
    assert proposal_digest(record(step=9, run_id="run-2", role="clerk", visit=2)) == \
        proposal_digest(base)


@pytest.mark.parametrize("change", [
    {"proposal": {**record().proposal, "amount_cents": 120001}},
    {"proposal": {**record().proposal, "invoice_id": "INV-2005"}},
    {"proposal": {**record().proposal, "limit": "$5,000.00"}},
    {"proposal": {**record().proposal, "args": {"a": 1, "b": [2, 1]}}},
    {"proposal": {k: v for k, v in record().proposal.items() if k != "limit"}},
    {"editable": ["amount_cents", "invoice_id"]},
    {"editable": []},
    {"limits": {"amount_cents": EditLimit(min=1, max=240000, rule="lower only")}},
    {"limits": {}},
    {"gate": "other_review"},
    {"node": "pay"},
])
def test_anything_the_approver_is_shown_changes_the_digest(change: dict[str, Any]) -> None:
    assert proposal_digest(record(**change)) != proposal_digest(record())

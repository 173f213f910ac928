"""The proposal digest a decision names: canonical (RFC 8785: key order, whitespace and
1.0-or-1 do not matter), and changed by anything the approver was shown."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tower.contract.decisions import (
    GateRecord,
    ProposalNotCanonical,
    canonical_bytes,
    canonical_proposal,
    digest_of,
    proposal_digest,
    same_request,
)
from tower.contract.pending import EditLimit, PendingView

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


def _doc_block(doc: str, name: str) -> str:
    """The fenced block after ``<!-- digest-vector: NAME -->`` in docs/approvals.md."""
    after = doc.split(f"<!-- digest-vector: {name} -->", 1)[1]
    return after.split("```", 2)[1].split("\n", 1)[1].strip()


@pytest.mark.parametrize("suffix", ["", "-empty"])
def test_the_documented_test_vectors_are_what_tower_computes(suffix: str) -> None:
    doc = (Path(__file__).parents[2] / "docs" / "approvals.md").read_text()
    pending = GateRecord.model_validate_json(_doc_block(doc, "pending" + suffix))
    canonical = _doc_block(doc, "canonical" + suffix)
    assert canonical_bytes(pending) == canonical.encode()
    assert proposal_digest(pending) == _doc_block(doc, "digest" + suffix)
    # RFC 8785 by its rules, not Python's: 1.0 is 1, and the bytes hash as documented.
    assert hashlib.sha256(canonical.encode()).hexdigest() == \
        proposal_digest(pending).removeprefix("sha256:")


def test_an_empty_array_and_null_have_one_digest() -> None:
    """The `temporal` CLI prints an empty array as null (``"editable": null``): a client
    digesting what it printed gets the run's digest."""
    none = record(editable=[], limits={}, proposal={"findings": [], "args": {"b": [[]]}})
    printed = json.loads(json.dumps(canonical_proposal(none)).replace("[]", "null"))
    assert printed["editable"] is None and printed["proposal"]["args"]["b"] == [None]
    assert digest_of(printed) == proposal_digest(none)
    assert b'"editable":null' in canonical_bytes(none)
    # A non-empty array is still an array, in its order.
    assert proposal_digest(record(proposal={"findings": ["x"]})) != proposal_digest(
        record(proposal={"findings": None}))


def test_a_float_and_the_integer_json_prints_for_it_have_one_digest() -> None:
    """The `temporal` CLI (Go) prints 1.0 as 1; JavaScript parses both as one number."""
    as_float = record(proposal={**record().proposal, "rate": 1.0})
    as_int = record(proposal={**record().proposal, "rate": 1})
    assert proposal_digest(as_float) == proposal_digest(as_int)
    assert b'"rate":1}' in canonical_bytes(as_float) and b'"min":1,' in canonical_bytes(as_float)
    assert proposal_digest(record(proposal={**record().proposal, "rate": 1.5})) != \
        proposal_digest(as_float)


@pytest.mark.parametrize("value", [2**53, -(2**53), float("nan"), float("inf")])
def test_a_value_no_other_language_can_digest_is_refused_by_name(value: Any) -> None:
    with pytest.raises(ProposalNotCanonical, match="cannot be canonicalized"):
        proposal_digest(record(proposal={"amount_cents": value}))
    assert proposal_digest(record(proposal={"amount_cents": 2**53 - 1})).startswith("sha256:")


def test_a_request_is_signed_only_as_its_published_view_shows_it() -> None:
    """The inbox and the AG-UI endpoint sign only when the run's pending request is the one
    its memo published; any field of it that differs (editable ones too) is another."""
    base = record()
    view = PendingView(gate=base.gate, node=base.node, when=base.when, step=base.step,
                       role=base.role, requested_at=AT, expires_at=AT,
                       editable=list(base.editable), shown=canonical_proposal(base))
    assert same_request(base, view)
    changes: list[dict[str, Any]] = [{"step": 4}, {"role": "dba"}, {"editable": []},
                                     {"proposal": {**base.proposal, "amount_cents": 1}}]
    for changed in changes:
        assert not same_request(record(**changed), view), changed
    assert not same_request(base, view.model_copy(update={"editable": []}))

"""`tower approve` shows, before it signs, the digest the decision will name: for a run
recorded before RFC 8785 digests, the legacy digest that run reports and judges by (not
the RFC 8785 one it would refuse). The end-to-end check that the digest shown is the one
signed is in tests/test_cli_approvals.py."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tower.cli.proposal import confirmer
from tower.contract.decisions import (
    GateRecord,
    legacy_proposal_digest,
    proposal_digest,
    signed_digest,
)

AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def test_a_legacy_runs_confirmation_shows_the_digest_it_signs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    record = GateRecord(gate="refund_review", node="issue_refund", when="before", visit=1,
                        step=3, role="manager", run_id="run-1", requested_at=AT,
                        expires_at=AT, proposal={"amount": 1.0, "invoice_id": "INV-2004"})
    legacy = legacy_proposal_digest(record)
    assert legacy != proposal_digest(record)  # Python's JSON writes 1.0, RFC 8785 writes 1
    signed = signed_digest(record, legacy)  # what the run reports, as tower.client asks it
    assert signed == legacy
    assert confirmer("approve", yes=True, ask=False, err=False)(record, signed) is True
    out = capsys.readouterr().out
    assert f"  digest {legacy}\n" in out and proposal_digest(record) not in out

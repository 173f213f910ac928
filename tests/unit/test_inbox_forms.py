"""The inbox's form reading and redirect rules, without a server."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tower.contract.decisions import Verdict
from tower.contract.pending import EditableField, EditLimit, PendingView
from tower.inbox.app import safe_next
from tower.inbox.forms import FormError, read_form

AT = datetime(2030, 1, 1, tzinfo=UTC)
VIEW = PendingView(
    agent="refund", node="issue_refund", gate="refund_review", when="before", role="manager",
    step=3, requested_at=AT, expires_at=AT,
    editable=["amount_cents"], fields=[EditableField(name="amount_cents", type="int", value=120000,
                            limit=EditLimit(min=1, max=120000, rule="lower only"))])


def form(**fields: str) -> dict[str, str]:
    return {"verdict": "approve", "gate": "refund_review", "request": "3", **fields}


def test_a_lowered_amount_is_an_edit_and_an_unchanged_one_is_not() -> None:
    assert read_form(form(**{"edit.amount_cents": "90000"}), VIEW).edits == {"amount_cents": 90000}
    assert read_form(form(**{"edit.amount_cents": "120000"}), VIEW).edits == {}
    rejected = read_form(form(verdict="reject", note=" no ", **{"edit.amount_cents": "5"}), VIEW)
    assert (rejected.verdict, rejected.note, rejected.edits) == (Verdict.REJECT, "no", {})


@pytest.mark.parametrize(("fields", "problem"), [
    ({"edit.amount_cents": "0"}, "must be between 1 and 120000 (lower only); got 0"),
    ({"edit.amount_cents": "1e3"}, "'1e3' is not a valid int"),
    ({"edit.limit_cents": "5"}, "limit_cents are not editable"),
    ({"verdict": "maybe"}, "choose approve or reject"),
    ({"gate": "dba_review"}, "the run now waits at 'refund_review'"),
    ({"request": "2"}, "for an earlier request than the one the run waits on now (step 3)"),
    ({"note": "x" * 1001}, "longer than 1000"),
])
def test_bad_forms_are_refused_with_the_reason(fields: dict[str, str], problem: str) -> None:
    with pytest.raises(FormError) as info:
        read_form(form(**fields), VIEW)
    assert problem in str(info.value)


@pytest.mark.parametrize(("target", "goes"), [
    ("/runs/r-1", "/runs/r-1"), (None, "/"), ("https://evil.test/", "/"),
    ("//evil.test/x", "/"), ("/\\evil.test", "/"),
])
def test_after_sign_in_only_this_apps_paths(target: str | None, goes: str) -> None:
    assert safe_next(target) == goes

"""The inbox's form reading, amounts in currency and redirect rules, without a server."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tower.cli.inbox.app import safe_next
from tower.cli.inbox.forms import FormError, cents_of, headline, money, read_form
from tower.contract.decisions import Verdict
from tower.contract.pending import EditableField, EditLimit, PendingView

AT = datetime(2030, 1, 1, tzinfo=UTC)
VIEW = PendingView(
    agent="refund", node="issue_refund", gate="refund_review", when="before", role="manager",
    step=3, requested_at=AT, expires_at=AT,
    editable=["amount_cents"], fields=[EditableField(name="amount_cents", type="int", value=120000,
                            limit=EditLimit(min=1, max=120000, rule="lower only"))])


def form(**fields: str) -> dict[str, str]:
    return {"verdict": "approve", "gate": "refund_review", "request": "3", **fields}


def test_a_lowered_amount_in_currency_is_an_edit_in_cents_and_an_unchanged_one_is_not() -> None:
    assert read_form(form(**{"money.amount_cents": "900"}), VIEW).edits == {"amount_cents": 90000}
    assert read_form(form(**{"money.amount_cents": "$1,199.99"}), VIEW).edits == {
        "amount_cents": 119999}
    assert read_form(form(**{"money.amount_cents": "1200.00"}), VIEW).edits == {}
    assert read_form(form(**{"money.amount_cents": " "}), VIEW).edits == {}
    rejected = read_form(form(verdict="reject", note=" no ", **{"money.amount_cents": "5"}), VIEW)
    assert (rejected.verdict, rejected.note, rejected.edits) == (Verdict.REJECT, "no", {})


@pytest.mark.parametrize(("typed", "cents"), [
    ("1200", 120000), ("1,200", 120000), ("1200.5", 120050), ("$1,200.50", 120050),
    (".05", 5), ("0.01", 1), ("12,345,678.90", 1234567890), ("19.99", 1999),
])
def test_amounts_typed_in_currency_convert_to_cents_exactly(typed: str, cents: int) -> None:
    assert cents_of(typed) == cents


@pytest.mark.parametrize("typed", ["", ".", "1.234", "-5", "+5", "1e3", "1,20", "12,00,000",
                                   "1 200", "nan", "inf", "0x10", "5 USD", "١٢"])
def test_what_is_not_plainly_an_amount_is_refused(typed: str) -> None:
    with pytest.raises(FormError):
        cents_of(typed)


def test_amounts_are_shown_in_currency_with_the_limit() -> None:
    assert (money(120000), money(5), money(None)) == ("$1,200.00", "$0.05", "any")
    proposal = {"action": "issue_refund", "amount_cents": "120000", "amount": "$1,200.00",
                "limit": "$500.00", "fee_cents": "250"}
    assert headline(proposal) == ("$1,200.00", "$500.00")
    assert headline({"amount_cents": "7", "limit_cents": "500"}) == ("$0.07", "$5.00")
    assert headline({"script": "DROP TABLE x"}) is None


@pytest.mark.parametrize(("fields", "problem"), [
    ({"money.amount_cents": "0"}, "amount must be between $0.01 and $1,200.00 (lower only); "
                                  "got $0.00"),
    ({"money.amount_cents": "1,300"}, "between $0.01 and $1,200.00 (lower only); got $1,300.00"),
    ({"money.amount_cents": "1e3"}, "amount: '1e3' is not an amount in dollars"),
    ({"money.amount_cents": "9.999"}, "more than two decimals"),
    # Cents where currency is expected: "90000" must never be read as $90,000 or 900.
    ({"edit.amount_cents": "90000"}, "amounts are entered in currency (e.g. 900.00), not cents"),
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

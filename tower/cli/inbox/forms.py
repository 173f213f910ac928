"""A decision form, read and checked before anything is signed or sent, and signed: a JWS
under the inbox's own issuer key, whose ``sub`` is the approver the inbox authenticated
(never a form field) and ``role`` the gate's (docs/inbox.md, docs/approvals.md).

The checks here give the approver a clear message early; the run checks everything again,
so a form forged past them changes nothing. An amount (an int field named ``*_cents``) is
typed in currency (``money.<field>``) and read back to cents exactly (Decimal, never float);
posted in cents (``edit.<field>``) it is refused: "500" must never be left to mean $500 or $5.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from pydantic import ValidationError
from temporalio.client import Client
from temporalio.service import RPCError

from tower.contract import names
from tower.contract.decisions import GateRecord, Verdict, proposal_digest, same_request
from tower.contract.failures import Code, TowerError
from tower.contract.pending import EditableField, PendingView
from tower.core.signing import decision_claims, sign

MAX_NOTE = 1000
LIFETIME_SECONDS = 300  # a decision is sent at once; it need not live long
QUERY_SECONDS = 5.0
SUFFIX = "_cents"
# 1200 · 1,200 · 1200.5 · 1,200.50 · $1,200.00 · .50 — nothing else.
AMOUNT = re.compile(r"\$?[ ]?(?P<whole>[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)?(?:\.(?P<frac>[0-9]*))?")


class FormError(TowerError, ValueError):  # a ValueError: read with the values it rejects
    """The form cannot become a decision (or typed text is not an amount); nothing was
    sent."""

    CODE = Code.BAD_INPUT


@dataclass(frozen=True)
class DecisionForm:
    verdict: Verdict
    note: str
    edits: dict[str, Any] = field(default_factory=dict)


def read_form(form: Mapping[str, str], view: PendingView) -> DecisionForm:
    """The verdict, note and changed editable fields of a posted form."""
    try:
        verdict = Verdict(form.get("verdict", ""))
    except ValueError:
        raise FormError("choose approve or reject") from None
    note = form.get("note", "").strip()
    if len(note) > MAX_NOTE:
        raise FormError(f"the note is longer than {MAX_NOTE} characters")
    if form.get("gate") != view.gate:
        raise FormError(f"this form is for gate {form.get('gate')!r}; the run now waits at "
                        f"{view.gate!r}: reload the page")
    if form.get("request") != str(view.step):
        # A form posted again (or kept open) after the run asked anew: what it decides
        # was shown for an earlier request.
        raise FormError(f"this form is for an earlier request than the one the run waits on "
                        f"now (step {view.step}): reload the page to see it")
    fields = {input_name(f) for f in view.fields}
    posted = [k for k in form if k.startswith(("edit.", "money.")) and k not in fields]
    in_cents = sorted(k[5:] for k in posted if k.startswith("edit.") and money_field(k[5:], view))
    if in_cents:
        raise FormError(f"{', '.join(in_cents)}: amounts are entered in currency "
                        "(e.g. 900.00), not cents")
    unknown = sorted(k.split(".", 1)[1] for k in posted)
    if unknown:
        raise FormError(f"field(s) {', '.join(unknown)} are not editable at gate {view.gate!r}")
    edits: dict[str, Any] = {}
    if verdict == Verdict.APPROVE:
        for f in view.fields:
            raw = form.get(input_name(f))
            if raw is None or raw.strip() == "":
                continue
            value = parse_value(f, raw.strip())
            if value != f.value:
                edits[f.name] = value
    return DecisionForm(verdict, note, edits)


def is_money(f: EditableField) -> bool:
    return f.type == "int" and f.name.endswith(SUFFIX)


def input_name(f: EditableField) -> str:
    """The form input of an editable field: ``money.amount_cents`` for an amount."""
    return f"money.{f.name}" if is_money(f) else f"edit.{f.name}"


def money_field(name: str, view: PendingView) -> bool:
    return any(f.name == name and is_money(f) for f in view.fields)


def parse_value(f: EditableField, raw: str) -> Any:
    """``raw`` as the field's type, within its limits."""
    try:
        value: Any
        if is_money(f):
            value = cents_of(raw)
        elif f.type == "int":
            value = int(raw)
        elif f.type == "float":
            value = float(raw)
            if not math.isfinite(value):
                raise ValueError(raw)
        elif f.type == "bool":
            value = raw.lower() in ("1", "true", "on", "yes")
        else:
            value = raw
    except FormError as exc:
        raise FormError(f"{label(f.name)}: {exc}") from None
    except ValueError:
        raise FormError(f"{f.name}: {raw!r} is not a valid {f.type}") from None
    if isinstance(value, int | float) and not isinstance(value, bool):
        low, high = f.limit.min, f.limit.max
        if (low is not None and value < low) or (high is not None and value > high):
            rule = f" ({f.limit.rule})" if f.limit.rule else ""
            show = money if is_money(f) else num
            raise FormError(f"{label(f.name) if is_money(f) else f.name} must be between "
                            f"{show(low)} and {show(high)}{rule}; got {show(value)}")
    return value


def label(name: str) -> str:
    """What a cents field is called on the page: ``amount_cents`` is the amount."""
    return name.removesuffix(SUFFIX)


def money(cents: int | float | None) -> str:
    """``120000`` as ``$1,200.00``; ``None`` (no bound) as ``any``."""
    if cents is None:
        return "any"
    whole = Decimal(int(cents))
    sign = "-" if whole < 0 else ""
    return f"{sign}${abs(whole) / 100:,.2f}"


def plain_money(cents: int) -> str:
    """``120000`` as ``1200.00``: what an input field holds (no symbol, no commas)."""
    return f"{Decimal(cents) / 100:.2f}"


def cents_of(raw: str) -> int:
    """Cents of an amount typed in currency: ``"1,200.5"`` is 120050."""
    typed = raw.strip()
    found = AMOUNT.fullmatch(typed)
    if not typed or found is None or (found["whole"] is None and not found["frac"]):
        raise FormError(f"{raw!r} is not an amount in dollars, such as 1,200.00")
    frac = found["frac"] or ""
    if len(frac) > 2:
        raise FormError(f"{raw!r} has more than two decimals: amounts are whole cents")
    whole = (found["whole"] or "0").replace(",", "")
    return int(whole) * 100 + int(frac.ljust(2, "0"))


def cents_value(value: object) -> int | None:
    """A proposal's ``*_cents`` value (text in the memo) as an int, or None if it is not one."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,18}", value.strip()):
        return int(value)
    return None


def headline(proposal: Mapping[str, str]) -> tuple[str, str] | None:
    """(amount, limit) in currency when the proposal has an amount, else None; the limit
    is ``any`` when the proposal names none."""
    amount = cents_value(proposal.get("amount_cents"))
    if amount is None:
        return None
    limit = cents_value(proposal.get("limit_cents"))
    return money(amount), (money(limit) if limit is not None else proposal.get("limit", "any"))


def num(value: float | None) -> str:
    if value is None:
        return "any"
    return str(int(value)) if float(value).is_integer() else str(value)


async def shown_request(client: Client, run: str, view: PendingView
                        ) -> tuple[GateRecord, str] | None:
    """The run's pending request (its ``approvals`` query) when it is the one ``view``
    shows (``same_request``), with the digest a decision on it names (``proposal_digest``).
    None when no worker answers or it differs: then nothing is signed."""
    try:
        approvals = await asyncio.wait_for(client.get_workflow_handle(run).query(
            names.APPROVALS.name, result_type=dict), QUERY_SECONDS)
        record = GateRecord.model_validate(approvals["pending"])
    except (TimeoutError, RPCError, ValidationError, KeyError, TypeError):
        return None
    return (record, proposal_digest(record)) if same_request(record, view) else None


def signed_decision(*, issuer: Mapping[str, Any], tenant: str, run: str, request: GateRecord,
                    digest: str, approver: str, form: DecisionForm) -> dict[str, Any]:
    """The wire message of the decision ``approver`` made in ``form`` on ``request``: it
    names the request's run id, step and proposal ``digest`` (what the page showed)."""
    try:
        claims = decision_claims(
            tenant=tenant, run=run, run_id=request.run_id, gate=request.gate,
            request=request.step, proposal=digest,
            verdict=form.verdict.value, sub=approver, role=request.role, edits=form.edits,
            note=form.note, jti=f"inbox-{uuid.uuid4().hex[:16]}", lifetime=LIFETIME_SECONDS,
            now=time.time())
    except ValidationError as exc:
        raise FormError(f"cannot sign this decision: {exc.errors()[0]['msg']}") from None
    return {"token": sign(claims, dict(issuer))}

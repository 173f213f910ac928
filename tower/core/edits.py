"""Edits an approver makes to a pending request, judged before they are accepted. Pure.

Edits are judged on the *planned* state (as the request was opened), so a rule
``edits["amount_cents"] <= planned.amount_cents`` means what it says; the request's
``limits`` are enforced here before the gate's own ``check_edits``. Each edit is read
strictly as JSON of its field's type, never converted (``true`` is not 1 cent), so what
the approver signed is what is paid.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import TypeAdapter, ValidationError

from tower.contract.decisions import Decision, GateStatus, Verdict
from tower.contract.pending import EditLimit
from tower.core.state import AgentState, UpdateError, apply_update

if TYPE_CHECKING:  # gates.py declares the Gate and calls these checks
    from tower.core.gates import Gate

# (the planned state, the edits) -> problem: the state as the request was opened, before
# the edits; the engine has checked the gate's ``limits`` first.
EditCheck = Callable[[Any, Mapping[str, Any]], str | None]
# The rules an ``EditLimit`` may name: (planned, edited) -> whether it holds, and the refusal.
RULES: dict[str, tuple[Callable[[Any, Any], bool], str]] = {
    "lower only": (lambda planned, edited: edited <= planned, "lowered: at most"),
    "higher only": (lambda planned, edited: edited >= planned, "raised: at least"),
}
# What a value of a field's type is, in an approver's words.
KINDS: dict[Any, str] = {int: "a whole number", float: "a number", bool: "true or false",
                         str: "text"}


def check_edits(gate: Gate, state: AgentState, d: Decision) -> str | None:
    """Why ``d``'s edits may not be applied to the pending request, or None: editable fields
    only, values of their types, the recorded ``limits``, then ``gate.check_edits``."""
    if not d.edits:
        return None
    if d.decision == Verdict.REJECT:
        return "a rejection cannot edit fields"
    bad = sorted(set(d.edits) - set(gate.editable))
    if bad:
        allowed = ", ".join(gate.editable) or "none"
        return f"field(s) {', '.join(bad)} not editable at gate {gate.name!r} (editable: {allowed})"
    for name in sorted(d.edits):
        problem = mistyped(type(state), name, d.edits[name])
        if problem:
            return problem
    try:
        edited = apply_update(state, d.edits)
    except UpdateError as exc:
        return f"edit refused: {exc}"
    pending = next((r for r in reversed(state.approvals)
                    if r.status == GateStatus.PENDING), None)
    for name in sorted(d.edits):
        if pending is not None and (limit := pending.limits.get(name)) is not None:
            problem = limit_problem(name, limit, getattr(state, name), getattr(edited, name))
            if problem:
                return problem
    if gate.check_edits is not None:
        return gate.check_edits(state, d.edits)
    return None


def mistyped(state_type: type[AgentState], name: str, value: Any) -> str | None:
    """Why ``value`` (an edit as JSON carries it) is not strictly of field ``name``'s type,
    in the approver's terms; None when it is."""
    info = state_type.model_fields.get(name)
    if info is None:  # not a field: apply_update says so
        return None
    try:
        _adapter(state_type, name).validate_json(json.dumps(value, allow_nan=False),
                                                  strict=True)
        return None
    except ValidationError as exc:
        error = exc.errors()[0]
        wrong_type, words = error["type"].endswith("_type"), error["msg"]
        if error["type"] == "json_invalid":  # nested past pydantic's recursion limit
            wrong_type, words = True, "Input should be JSON nested less deeply"
    except (TypeError, ValueError):  # not JSON at all (NaN, an infinity)
        wrong_type, words = True, "Input should be a JSON value"
    kind = KINDS.get(info.annotation) if wrong_type and isinstance(info.annotation, type) else None
    if kind is None:  # a constraint (``Field(ge=1)``), or a type without words of ours
        kind = words.removeprefix("Input should be ")
    elif info.annotation is int and name.endswith("_cents"):
        kind += " of cents"
    return f"{name} must be {kind}; got {_json(value)}"


@functools.cache
def _adapter(state_type: type[AgentState], name: str) -> TypeAdapter[Any]:
    info = state_type.model_fields[name]
    annotation: Any = info.annotation
    if info.metadata:  # its constraints (``Field(ge=1)``) hold for an edit too
        annotation = Annotated[annotation, *info.metadata]
    return TypeAdapter(annotation)


def _json(value: Any) -> str:
    """``value`` as the decision's JSON wrote it, inert (non-ASCII escaped)."""
    try:
        return json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return repr(value).encode("ascii", "backslashreplace").decode()


def limit_problem(name: str, limit: EditLimit, planned: Any, value: Any) -> str | None:
    """Why ``value`` (the edit, as the field's type) breaks ``limit``, or None."""
    if limit.rule and limit.rule not in RULES:
        known = ", ".join(repr(r) for r in RULES)
        return (f"{name}: the gate's limit names rule {limit.rule!r}, which Tower does not "
                f"enforce (known: {known}); no edit of it is accepted")
    holds, words = RULES.get(limit.rule, (None, ""))
    if holds is not None and not holds(planned, value):
        return f"{name} may only be {words} {planned} (asked {value})"
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    if (limit.min is not None or limit.max is not None) and not numeric:
        return f"{name} must be a number (asked {value!r})"
    if limit.min is not None and value < limit.min:
        return f"{name} must be at least {limit.min:g} (asked {value})"
    if limit.max is not None and value > limit.max:
        return f"{name} must be at most {limit.max:g} (asked {value})"
    return None

"""An approver's edits are judged on the planned state, within the gate's declared limits.

The trap this closes: ``check_edits`` used to receive the state with the edits already
applied, so a rule "the new amount is at most the state's amount" compared 900 with 900
and accepted a manager's raise from 820 to 900.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest
from pydantic import Field

from tower import DONE, AgentState, Gate, Graph
from tower.contract.decisions import Decision, Verdict, proposal_digest
from tower.contract.failures import Code, TowerError
from tower.contract.pending import EditLimit
from tower.core.edits import mistyped
from tower.core.gates import check_decision
from tower.core.graph import Machine
from tower.testing import approve, run_agent

SEEN: list[tuple[int, dict[str, Any]]] = []  # what the rule was handed


class PayState(AgentState):
    amount: int = 820
    paid: int = 0


async def pay(ctx: Any, state: PayState) -> dict[str, Any]:
    return {"paid": state.amount}


async def decline(ctx: Any, state: PayState) -> dict[str, Any]:
    return {}


def at_most_planned(planned: PayState, edits: Mapping[str, Any]) -> str | None:
    """The rule as a user writes it: the new amount may not exceed the state's."""
    SEEN.append((planned.amount, dict(edits)))
    if edits.get("amount", planned.amount) > planned.amount:
        return "the amount may only go down"
    return None


def machine(**gate: Any) -> Machine:
    return (Graph("pay", PayState)
            .node("pay", pay).node("decline", decline).entry("pay")
            .gate("pay", Gate(name="review", role="manager", timeout=timedelta(hours=1),
                              on_reject="decline", on_timeout="decline",
                              editable=("amount",), **gate))
            .edge("pay", DONE).edge("decline", DONE).compile())


async def paid(m: Machine, **edits: Any) -> int:
    run = await run_agent(m, PayState(), decisions=[approve("ann", edits=edits)])
    assert run.state.node == DONE
    return run.state.paid


async def test_a_raise_is_refused_by_a_rule_on_the_planned_amount() -> None:
    m = machine(check_edits=at_most_planned)
    SEEN.clear()
    with pytest.raises(TowerError, match="the amount may only go down"):
        await paid(m, amount=900)
    assert SEEN == [(820, {"amount": 900})]  # the planned 820, not the edited 900
    assert await paid(m, amount=700) == 700
    assert await paid(m) == 820


async def test_declared_limits_are_enforced_by_the_engine_before_the_rule() -> None:
    def limits(s: PayState) -> Mapping[str, EditLimit]:
        return {"amount": EditLimit(min=1, max=s.amount, rule="lower only")}

    SEEN.clear()
    m = machine(limits=limits, check_edits=at_most_planned)
    for amount, why in ((900, "amount may only be lowered: at most 820 (asked 900)"),
                        (0, "amount must be at least 1 (asked 0)")):
        with pytest.raises(TowerError, match=re.escape(f"refuses the scripted decision: {why}")):
            await paid(m, amount=amount)
    assert SEEN == []  # refused by the engine: the rule never ran
    assert await paid(machine(limits=limits), amount=500) == 500  # limits alone suffice
    with pytest.raises(TowerError, match="may only be lowered"):
        await paid(machine(limits=limits), amount=821)


async def test_max_and_higher_only_and_an_unknown_rule() -> None:
    def capped(s: PayState) -> Mapping[str, EditLimit]:
        return {"amount": EditLimit(max=1000)}

    def up(s: PayState) -> Mapping[str, EditLimit]:
        return {"amount": EditLimit(rule="higher only")}

    def odd(s: PayState) -> Mapping[str, EditLimit]:
        return {"amount": EditLimit(rule="only lower")}  # a typo must not pass unenforced

    with pytest.raises(TowerError, match="at most 1000"):
        await paid(machine(limits=capped), amount=1001)
    assert await paid(machine(limits=capped), amount=1000) == 1000
    with pytest.raises(TowerError, match="may only be raised: at least 820"):
        await paid(machine(limits=up), amount=819)
    with pytest.raises(TowerError, match="rule 'only lower', which Tower does not enforce"):
        await paid(machine(limits=odd), amount=10)


# The attack of issue 37: `true` paid 1 cent, `100.0` was paid as 100, `"100"` was refused
# in Python's words ("'<' not supported between instances of 'int' and 'str'").
@pytest.mark.parametrize(("value", "shown"), [(True, "true"), (100.0, "100.0"),
                                              ("100", '"100"'), (None, "null")])
async def test_a_mistyped_edit_is_refused_as_bad_edit_in_the_approvers_terms(
    value: Any, shown: str,
) -> None:
    m = machine(check_edits=at_most_planned)
    state = (await run_agent(m, PayState(), expire=False)).state
    pending = state.approvals[-1]
    SEEN.clear()
    check = check_decision(
        Decision(decision_id="d1", tenant="t", run="r", gate="review",
                 decision=Verdict.APPROVE, approver="ann", role="manager",
                 expires_at=pending.expires_at, edits={"amount": value},
                 request=pending.step, run_id=pending.run_id,
                 proposal=proposal_digest(pending)),
        state=state, gates={"review": m.gates["pay"]}, tenant="t",
        now=pending.requested_at)
    assert (check.ok, check.code) == (False, Code.BAD_EDIT)
    assert check.reason == f"amount must be a whole number; got {shown}"
    assert SEEN == []  # refused before any rule compared it
    with pytest.raises(TowerError, match=re.escape(f"amount must be a whole number; got {shown}")):
        await paid(m, amount=value)
    assert await paid(m, amount=100) == 100


class Priced(AgentState):
    amount_cents: int = 500
    rate: float = 1.0
    note: str = ""
    rush: bool = False
    seats: int = Field(default=1, ge=1)


@pytest.mark.parametrize(("name", "value", "why"), [
    ("amount_cents", True, "amount_cents must be a whole number of cents; got true"),
    ("amount_cents", 1.5, "amount_cents must be a whole number of cents; got 1.5"),
    ("amount_cents", float("nan"), "amount_cents must be a whole number of cents; got nan"),
    ("rate", "1.5", 'rate must be a number; got "1.5"'),
    ("rate", False, "rate must be a number; got false"),
    ("note", 7, "note must be text; got 7"),
    ("rush", 1, "rush must be true or false; got 1"),
    ("seats", 0, "seats must be greater than or equal to 1; got 0"),
    # Whatever the value holds is shown inert: escaped, never raw.
    ("amount_cents", "5\x1b[2J\u202e", r'amount_cents must be a whole number of cents; '
                                       r'got "5\u001b[2J\u202e"'),
])
def test_each_field_type_is_read_strictly(name: str, value: Any, why: str) -> None:
    assert mistyped(Priced, name, value) == why


@pytest.mark.parametrize(("name", "value"), [("amount_cents", 100), ("rate", 2),
                                             ("rate", 0.5), ("note", "ok"), ("rush", True),
                                             ("seats", 3), ("unknown", "x")])
def test_a_value_of_the_fields_type_passes(name: str, value: Any) -> None:
    assert mistyped(Priced, name, value) is None


def test_an_edit_nested_past_the_parsers_limit_is_refused_in_words_not_a_crash() -> None:
    deep = json.loads("[" * 900 + "]" * 900)
    why = mistyped(Priced, "amount_cents", deep)
    assert why is not None
    assert why.startswith("amount_cents must be a whole number of cents; got [[[")

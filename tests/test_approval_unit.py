"""Gates without a server: graph validation, gate moves, and every decision check."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from joserfc import jws
from joserfc.jwk import OKPKey

from tower import DONE, AgentState, Graph
from tower.client.keys import new_key
from tower.contract.decisions import Decision, GateStatus, Verdict, proposal_digest
from tower.contract.failures import Code as C
from tower.contract.failures import InvalidGraph
from tower.contract.trust import Member, Policy, Roster, TrustSnapshot
from tower.core.engine import advance, start
from tower.core.gates import Gate, check_decision, close_gate, needs_gate, open_gate, read_decision
from tower.core.signing import DECISION_TYPE, decision_claims, public_of, sign
from tower.core.state import Status, UpdateError, apply_update

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
TENANT, RUN, RUN_ID = "acme", "pay-1", "run-id-1"
ALICE, CAROL = new_key("alice-1"), new_key("carol-1")
ROSTER = Roster(tenant=TENANT, members=[
    Member(name="alice", roles=["manager"], keys=[public_of(ALICE)]),
    Member(name="carol", roles=["clerk"], keys=[public_of(CAROL)])])


def trust(**policy: Any) -> TrustSnapshot:
    return TrustSnapshot(roster=ROSTER, policy=Policy(tenant=TENANT, **policy), digest="x")


class PayState(AgentState):
    amount: int = 0
    planned: int = 0
    note: str = ""


async def nop(ctx: Any, state: Any) -> dict[str, Any]:
    return {}


def lower_only(planned: PayState, edits: Any) -> str | None:
    # The gate's rule sees the planned state and the edits (tower/core/edits.py).
    asked = edits.get("amount", planned.amount)
    return None if asked <= planned.amount else "amount may only be lowered"


GATE = Gate(name="review", role="manager", timeout=timedelta(hours=48), on_reject="notify",
            on_timeout="notify", editable=("amount",), check_edits=lower_only,
            applies=lambda s: s.amount > 100, proposal=lambda s: {"amount": s.amount})


def graph(gate: Gate = GATE) -> Graph:
    return (Graph("pay", PayState).node("plan", nop).node("pay", nop).node("notify", nop)
            .entry("plan").edge("plan", "pay").edge("pay", DONE).edge("notify", DONE)
            .gate("pay", gate))


MACHINE = graph().compile()


def at_gate(amount: int = 500) -> PayState:
    state, _ = start(MACHINE, PayState(amount=amount, planned=amount), at=T0, event_id=1)
    state, _ = advance(MACHINE, state, "plan", {}, at=T0, event_id=2)
    assert state.node == "pay"
    held, log = open_gate(MACHINE, state, MACHINE.gates["pay"], at=T0, event_id=3,
                          run_id=RUN_ID)
    assert log.source == log.target == "pay"
    return held


SHOWN = proposal_digest(at_gate().approvals[-1])  # what the approver saw


def decision(**kw: Any) -> Decision:
    """A decision record as ``read_decision`` makes it from a verified token."""
    fields: dict[str, Any] = dict(decision_id="d-1", tenant=TENANT, run=RUN, gate="review",
                                  decision=Verdict.APPROVE, approver="alice", role="manager",
                                  expires_at=T0 + timedelta(hours=2), kid="alice-1", request=3,
                                  run_id=RUN_ID, proposal=SHOWN)
    fields.update(kw)
    return Decision(**fields)


def check(d: Decision, state: Any = ..., **kw: Any) -> Any:
    args: dict[str, Any] = dict(state=at_gate() if state is ... else state,
                                gates={"review": MACHINE.gates["pay"]}, tenant=TENANT,
                                now=T0 + timedelta(hours=1))
    args.update(kw)
    return check_decision(d, **args)


def token(key: dict[str, Any] = ALICE, **kw: Any) -> dict[str, Any]:
    fields: dict[str, Any] = dict(tenant=TENANT, run=RUN, run_id=RUN_ID, gate="review",
                                  request=3, proposal=SHOWN, verdict="approve", sub="alice",
                                  role="manager", jti="d-1",
                                  now=(T0 + timedelta(hours=1)).timestamp())
    fields.update(kw)
    return {"token": sign(decision_claims(**fields), key)}


def sign_raw(claims: dict[str, Any], private: dict[str, Any]) -> str:
    """A decision token over claims exactly as given (any JSON types), signed by ``private``."""
    key = OKPKey.import_key({k: v for k, v in private.items() if k != "kid"})
    header = {"alg": "Ed25519", "kid": private["kid"], "typ": DECISION_TYPE}
    return jws.serialize_compact(header, json.dumps(claims), key,
                                 registry=jws.JWSRegistry(algorithms=["Ed25519"]))


def read(message: dict[str, Any], **policy: Any) -> tuple[Decision | None, str]:
    d, why = read_coded(message, **policy)
    return d, why[1]


def read_coded(message: dict[str, Any], **policy: Any
               ) -> tuple[Decision | None, tuple[C | None, str]]:
    d, check = read_decision(message, trust=trust(**policy), now=T0 + timedelta(hours=1))
    assert check.ok == (d is not None) == (check.code is None)
    return d, (check.code, check.reason)


def test_open_gate_records_pending_and_awaits_without_a_visit() -> None:
    state = at_gate()
    assert state.status == Status.AWAITING_APPROVAL and state.node == "pay"
    assert state.visits == {"plan": 1, "pay": 1}
    (record,) = state.approvals
    assert record.status == GateStatus.PENDING and record.proposal == {"amount": 500}
    assert record.expires_at == T0 + timedelta(hours=48) and record.role == "manager"
    assert not needs_gate(state, MACHINE.gates["pay"])


def test_gate_applies_only_when_its_predicate_holds() -> None:
    state, _ = start(MACHINE, PayState(amount=50), at=T0, event_id=1)
    state, _ = advance(MACHINE, state, "plan", {}, at=T0, event_id=2)
    assert not needs_gate(state, MACHINE.gates["pay"])


def test_approval_stays_at_node_and_rejection_routes() -> None:
    gate = MACHINE.gates["pay"]
    held = at_gate()
    ok, log = close_gate(MACHINE, held, gate, GateStatus.APPROVED, target="pay", at=T0,
                         event_id=4, decision=decision(), update={"amount": 300})
    assert (ok.node, ok.status, ok.step, ok.amount) == ("pay", Status.RUNNING, 4, 300)
    assert ok.approvals[-1].status == GateStatus.APPROVED and "alice" in log.reason
    no, log = close_gate(MACHINE, held, gate, GateStatus.REJECTED, target="notify", at=T0,
                         event_id=4, decision=decision(decision=Verdict.REJECT))
    assert (no.node, no.visits["notify"]) == ("notify", 1) and log.target == "notify"


def test_valid_signed_decision_passes() -> None:
    result = check(decision(edits={"amount": 200}))
    assert result.ok and not result.duplicate


@pytest.mark.parametrize(("change", "code", "reason"), [
    (dict(tenant="other"), C.WRONG_RUN, "tenant 'other'"),
    # Another workflow's decision carries its run id: refused whatever its step.
    (dict(run="pay-2", run_id="run-id-2"), C.WRONG_RUN, "'pay-2', made for run id run-id-2"),
    (dict(run="pay-2", run_id="run-id-2", request=9), C.WRONG_RUN, "run 'pay-2'"),
    (dict(run="pay-2", run_id="run-id-2", gate="nope"), C.WRONG_RUN, "run 'pay-2'"),
    (dict(run_id="run-id-2"), C.WRONG_RUN, "run id run-id-2"),
    (dict(role="clerk"), C.NOT_AUTHORIZED, "role 'clerk' may not decide"),
    (dict(gate="nope"), C.NOT_PENDING, "unknown gate 'nope'"),
    (dict(edits={"note": "x"}), C.BAD_EDIT, "not editable"),
    (dict(edits={"amount": 900}), C.BAD_EDIT, "may only be lowered"),
    (dict(edits={"amount": "lots"}), C.BAD_EDIT, "amount must be a whole number; got \"lots\""),
    (dict(decision=Verdict.REJECT, edits={"amount": 1}), C.BAD_EDIT, "rejection cannot edit"),
    (dict(request=2), C.WRONG_REQUEST, "answers the request opened at step 2"),
    (dict(proposal="sha256:" + "0" * 64), C.WRONG_PROPOSAL, "another proposal"),
])
def test_refusals(change: dict[str, Any], code: C, reason: str) -> None:
    result = check(decision(**change))
    assert not result.ok and result.code == code and reason in result.reason


def test_a_verified_token_becomes_the_decision_record() -> None:
    d, why = read(token(edits={"amount": 200}, note="ok"))
    assert why == "" and d is not None and d.signed
    assert (d.approver, d.role, d.kid, d.request, d.edits) == (
        "alice", "manager", "alice-1", 3, {"amount": 200})
    assert check(d).ok


@pytest.mark.parametrize(("message", "code", "reason"), [
    (token(key={**new_key(), "kid": "alice-1"}), C.BAD_SIGNATURE,  # a forged key
     "invalid signature"),
    (token(key=new_key("mallory-1")), C.UNKNOWN_KEY, "unknown key id 'mallory-1'"),
    (token(key=CAROL, sub="carol"), C.NOT_AUTHORIZED, "carol does not hold role 'manager'"),
    (token(key=CAROL, sub="alice"), C.NOT_AUTHORIZED, "key of carol may not sign as 'alice'"),
    (token(now=T0.timestamp()), C.TOKEN_EXPIRED, "expired"),
    (token(lifetime=7200, now=(T0 + timedelta(minutes=30)).timestamp()), C.POLICY,
     "at most 3600s"),
    ({"token": "not-a-jws"}, C.MALFORMED, "malformed token"),
    ({"decision_id": "d-1", "signature": "0" * 64}, C.MALFORMED,  # the old format
     "malformed decision"),
    ({"unsigned": {"tenant": TENANT}}, C.POLICY, "unsigned decision refused"),
])
def test_tokens_that_prove_nothing(message: dict[str, Any], code: C, reason: str) -> None:
    d, (got, why) = read_coded(message)
    assert d is None and got == code and reason in why


def test_claims_are_read_strictly_never_coerced() -> None:
    """A signed token whose step is the string "3" is not a decision for step 3."""
    claims = decision_claims(tenant=TENANT, run=RUN, run_id=RUN_ID, gate="review",
                             request=3, proposal=SHOWN, verdict="approve", sub="alice",
                             role="manager", jti="d-s",
                             now=(T0 + timedelta(hours=1)).timestamp())
    for field, value in [("request", "3"), ("request", 3.0), ("iat", str(claims.iat)),
                         ("note", 7)]:
        wire = {**claims.model_dump(mode="json"), field: value}
        d, (code, why) = read_coded({"token": sign_raw(wire, ALICE)})
        assert d is None and code == C.MALFORMED and f"bad claims: {field}" in why
        d, (code, why) = read_coded({"unsigned": wire}, unsigned_allowed=True)
        assert d is None and code == C.MALFORMED and field in why
    assert read_coded({"token": sign_raw(claims.model_dump(mode="json"), ALICE)})[0]


def test_a_proposal_no_client_could_digest_fails_the_run_at_the_gate() -> None:
    state, _ = start(MACHINE, PayState(amount=2**60, planned=2**60), at=T0, event_id=1)
    state, _ = advance(MACHINE, state, "plan", {}, at=T0, event_id=2)
    failed, log = open_gate(MACHINE, state, MACHINE.gates["pay"], at=T0, event_id=3,
                            run_id=RUN_ID)
    assert failed.status == Status.FAILED and not failed.approvals
    assert "cannot be canonicalized (RFC 8785)" in log.reason


def test_only_what_the_roster_says_waits_for_its_next_read() -> None:
    """What a run judges again after its next roster read (tower/temporal/_gate.py): a key
    id the roster does not name, a role it does not grant the signer. Told by the check's
    field, not its wording; a forged key under a known id is not one of them."""
    def check(message: dict[str, Any]) -> Any:
        return read_decision(message, trust=trust(), now=T0 + timedelta(hours=1))[1]

    unknown = check(token(key=new_key("erin-2")))
    forged = check(token(key={**new_key(), "kid": "alice-1"}))
    no_role = check(token(role="dba"))
    assert unknown.by_roster and unknown.code == C.UNKNOWN_KEY and not unknown.ok
    assert "unknown key id 'erin-2'" in unknown.reason
    assert no_role.by_roster and no_role.code == C.NOT_AUTHORIZED and not no_role.ok
    assert not forged.by_roster and not forged.ok


def test_unsigned_only_where_the_deployment_allows_it() -> None:
    claims = decision_claims(tenant=TENANT, run=RUN, run_id=RUN_ID, gate="review", request=3,
                             proposal=SHOWN, verdict="approve", sub="dev", role="manager",
                             jti="d-u",
                             now=(T0 + timedelta(hours=1)).timestamp())
    d, why = read({"unsigned": claims.model_dump()}, unsigned_allowed=True)
    assert d is not None and not d.signed and why == ""
    assert check(d).ok


def test_expired_request_is_refused() -> None:
    result = check(decision(expires_at=T0 + timedelta(hours=49)), now=T0 + timedelta(hours=48))
    assert not result.ok and result.code == C.EXPIRED and "expired" in result.reason


def test_no_pending_gate_before_the_gate_is_reached() -> None:
    state, _ = start(MACHINE, PayState(amount=500), at=T0, event_id=1)
    result = check(decision(), state=state)
    assert not result.ok and result.code == C.NOT_PENDING
    assert "not awaiting a decision" in result.reason
    assert check(decision(), state=None).code == C.NOT_PENDING


def test_duplicates_and_a_second_decision() -> None:
    first = decision()
    gate = MACHINE.gates["pay"]
    done, _ = close_gate(MACHINE, at_gate(), gate, GateStatus.APPROVED, target="pay", at=T0,
                         event_id=4, decision=first)
    assert check(first, state=done).duplicate
    assert check(decision(note="x"), state=done).code == C.ALREADY_DECIDED
    second = check(decision(decision_id="d-2", decision=Verdict.REJECT), state=done)
    assert second.code == C.ALREADY_DECIDED and "approve by alice" in second.reason
    racing = check(decision(decision_id="d-2", decision=Verdict.REJECT), in_flight=first)
    assert racing.code == C.ALREADY_DECIDED
    assert check(first, in_flight=first).duplicate


def test_expired_record_names_its_expiry() -> None:
    gate = MACHINE.gates["pay"]
    gone, _ = close_gate(MACHINE, at_gate(), gate, GateStatus.EXPIRED, target="notify", at=T0,
                         event_id=4, why="no decision")
    refused = check(decision(), state=gone)
    assert refused.code == C.EXPIRED and "expired at 2026-12-03T09:00:00" in refused.reason


def test_approvals_are_protected_from_node_updates() -> None:
    with pytest.raises(UpdateError, match="protected field 'approvals'"):
        apply_update(at_gate(), {"approvals": []})


@pytest.mark.parametrize(("gate", "problem"), [
    (Gate(name="g", role="", timeout=timedelta(1), on_reject="notify", on_timeout="notify"),
     "names no role"),
    (Gate(name="g", role="r", timeout=timedelta(0), on_reject="notify", on_timeout="notify"),
     "timeout must be positive"),
    (Gate(name="g", role="r", timeout=timedelta(1), on_reject="nowhere", on_timeout="notify"),
     "unknown node 'nowhere'"),
    (Gate(name="g", role="r", timeout=timedelta(1), on_reject="notify", on_timeout="notify",
          editable=("step",)), "not an editable field"),
    (Gate(name="g", role="r", timeout=timedelta(1), on_reject="notify", on_timeout="notify",
          on_stale="plan"), "recheck and on_stale go together"),
])
def test_bad_gates_fail_when_built(gate: Gate, problem: str) -> None:
    with pytest.raises(InvalidGraph, match=problem):
        graph(gate).compile()


def test_gate_routes_make_nodes_reachable_and_declared() -> None:
    # "notify" is reachable only through the gate's routes.
    assert MACHINE.declared("pay", "notify") and MACHINE.declared("pay", "pay")
    assert not MACHINE.declared("plan", "notify")


def test_after_gate_holds_the_nodes_update_until_approved() -> None:
    machine = graph(replace(GATE, when="after", applies=None)).compile()
    gate = machine.gates["pay"]
    state, _ = start(machine, PayState(amount=500), at=T0, event_id=1)
    state, _ = advance(machine, state, "plan", {}, at=T0, event_id=2)
    held, log = open_gate(machine, state, gate, at=T0, event_id=3, run_id=RUN_ID,
                          update={"note": "drafted"})
    assert held.note == "drafted" and log.update == {"note": "drafted"}
    assert held.status == Status.AWAITING_APPROVAL and held.node == "pay"
    ok, _ = close_gate(machine, held, gate, GateStatus.APPROVED, target="pay", at=T0,
                       event_id=4, decision=decision())
    done, log = advance(machine, ok, "pay", {}, at=T0, event_id=5)
    assert (log.source, log.target, done.status) == ("pay", DONE, Status.DONE)

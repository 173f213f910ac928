"""Signed decisions: what verifies, what is refused and why, and that a token made without
joserfc (the ``cryptography`` primitives by hand, as docs/approvals.md describes) verifies."""

from __future__ import annotations

import base64
import json
import stat
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from pydantic import ValidationError

from tower.activities.trust import TrustError, read_trust
from tower.cli.common import CliError
from tower.cli.trust_files import enrol, ensure_policy
from tower.client.keys import create_key, load_key, new_key, sign_decision
from tower.contract.trust import Member, PublicKey, Roster
from tower.core.signing import (
    SignatureRefused,
    authority,
    decision_claims,
    public_of,
    sign,
    verify_decision,
)

NOW = 1_800_000_000


def claims(**kw: Any) -> Any:
    base: dict[str, Any] = dict(tenant="default", run="refund-1", run_id="run-id-1",
                                gate="refund_review", request=3, proposal="sha256:" + "a" * 64,
                                verdict="approve", sub="alice", role="manager",
                                jti="d-1", now=NOW)
    return decision_claims(**(base | kw))


def roster_of(*members: tuple[str, dict[str, Any], list[str]]) -> Roster:
    return Roster(tenant="default", members=[
        Member(name=name, roles=roles, keys=[public_of(key)]) for name, key, roles in members])


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def test_a_signed_decision_verifies_with_the_public_key_only() -> None:
    alice = new_key("alice-1")
    roster = roster_of(("alice", alice, ["manager"]))
    assert alice["d"] not in json.dumps(roster.model_dump())  # nothing in it can sign
    got, who, kid = verify_decision(sign(claims(), alice), roster, now=NOW + 1)
    assert (got, who.name, kid) == (claims(), "alice", "alice-1")
    assert authority(who, got.sub, got.role) is None


@pytest.mark.parametrize("mutate, reason", [
    (lambda t: t[:-4] + ("AAAA" if not t.endswith("AAAA") else "BBBB"), "invalid signature"),
    (lambda t: "x.y", "malformed"),
    (lambda t: t.replace(t.split(".")[1], b64(b'{"tenant":"other"}')), "invalid signature"),
])
def test_tampered_tokens_are_refused(mutate: Any, reason: str) -> None:
    alice = new_key("alice-1")
    with pytest.raises(SignatureRefused, match=reason):
        verify_decision(mutate(sign(claims(), alice)), roster_of(("alice", alice, ["m"])),
                        now=NOW)


def test_unknown_revoked_or_foreign_keys_and_expired_tokens_are_refused() -> None:
    alice, mallory = new_key("alice-1"), new_key("alice-1")  # same kid, another key
    roster = roster_of(("alice", alice, ["manager"]))
    with pytest.raises(SignatureRefused, match="invalid signature"):
        verify_decision(sign(claims(), mallory), roster, now=NOW)
    with pytest.raises(SignatureRefused, match="unknown key id"):
        verify_decision(sign(claims(), new_key("gone")), roster, now=NOW)
    with pytest.raises(SignatureRefused, match="expired"):
        verify_decision(sign(claims(), alice), roster, now=NOW + 601)
    with pytest.raises(SignatureRefused, match="future"):
        verify_decision(sign(claims(now=NOW + 3600), alice), roster, now=NOW)


def test_roles_come_from_the_roster_not_from_the_signer() -> None:
    clerk = Member(name="carol", roles=["clerk"], keys=[public_of(new_key("c"))])
    inbox = Member(name="inbox", vouches_for=["manager"], keys=[public_of(new_key("i"))])
    assert "does not hold role 'manager'" in (authority(clerk, "carol", "manager") or "")
    assert "may not sign as 'alice'" in (authority(clerk, "alice", "clerk") or "")
    assert authority(inbox, "alice", "manager") is None  # an issuer vouching for its user
    assert "may not vouch for role 'dba'" in (authority(inbox, "alice", "dba") or "")


def test_no_other_algorithm_is_accepted() -> None:
    alice = new_key("alice-1")
    header = b64(json.dumps({"alg": "HS256", "kid": "alice-1",
                             "typ": "tower-decision+jwt"}).encode())
    token = f"{header}.{b64(b'{}')}.{b64(b'x' * 32)}"
    with pytest.raises(SignatureRefused, match="not accepted"):
        verify_decision(token, roster_of(("alice", alice, ["m"])), now=NOW)


def test_a_token_signed_by_hand_with_cryptography_verifies() -> None:
    """A second, independent implementation: RFC 7515 compact serialization written out
    with the ``cryptography`` primitives, exactly as docs/approvals.md describes it."""
    private = Ed25519PrivateKey.generate()
    x = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    roster = Roster(tenant="default", members=[Member(name="alice", roles=["manager"], keys=[
        PublicKey(kty="OKP", crv="Ed25519", x=b64(x), kid="hand-1")])])
    header = {"alg": "EdDSA", "kid": "hand-1", "typ": "tower-decision+jwt"}
    payload = {"tenant": "default", "run": "refund-1", "run_id": "run-id-1",
               "gate": "refund_review", "request": 3, "proposal": "sha256:" + "a" * 64,
               "verdict": "reject", "sub": "alice", "role": "manager", "note": "by hand",
               "edits": {}, "jti": "hand-made", "iat": NOW, "exp": NOW + 300}
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}"
    token = f"{signing_input}.{b64(private.sign(signing_input.encode()))}"
    got, who, _ = verify_decision(token, roster, now=NOW)
    assert (got.verdict, got.note, who.name) == ("reject", "by hand", "alice")


def test_a_roster_refuses_private_keys(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="Extra inputs"):
        PublicKey.model_validate({**new_key("k"), "crv": "Ed25519"})
    folder = tmp_path / "default"
    folder.mkdir()
    member = {"name": "alice", "roles": ["manager"], "keys": [new_key("k")]}
    (folder / "roster.json").write_text(json.dumps({"tenant": "default", "members": [member]}))
    ensure_policy(tmp_path, "default")
    with pytest.raises(TrustError, match="roster.json is invalid"):
        read_trust(tmp_path, "default")


def test_trust_files_per_tenant(tmp_path: Path) -> None:
    config = tmp_path / "config"
    with pytest.raises(TrustError, match="no roster.json for tenant 'default'"):
        read_trust(tmp_path / "trust", "default")
    with pytest.raises(TrustError, match="invalid tenant name"):
        read_trust(tmp_path / "trust", "../etc")
    enrol(tmp_path / "trust", "default", "alice", config=config, roles=["manager"])
    ensure_policy(tmp_path / "trust", "default")
    snap = read_trust(tmp_path / "trust", "default")
    assert [m.name for m in snap.roster.members] == ["alice"]
    assert snap.policy.unsigned_allowed is False  # signed decisions unless the deployment says
    token, made = sign_decision("alice", config=config, tenant="default", run="r",
                                run_id="run-id-1", gate="g", request=1,
                                proposal="sha256:" + "a" * 64, verdict="approve",
                                role="manager")
    assert verify_decision(token, snap.roster, now=made.iat)[0] == made


def test_private_key_files_are_private(tmp_path: Path) -> None:
    public = create_key("alice", tmp_path)
    path = tmp_path / "keys" / "alice.jwk"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert public_of(load_key("alice", tmp_path)) == public
    with pytest.raises(CliError, match="never overwritten"):
        create_key("alice", tmp_path)
    path.chmod(0o644)
    with pytest.raises(CliError, match="readable by others"):
        load_key("alice", tmp_path)
    with pytest.raises(CliError, match="invalid name"):
        create_key("../x", tmp_path)

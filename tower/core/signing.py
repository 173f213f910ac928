"""Signed decisions and events: JWS compact, EdDSA over Ed25519, verified with public keys.

Pure (``now`` is passed in), so an update validator answers alike on every replay.
joserfc does the JWS work, strict about algorithms: ``none`` and HMAC are never accepted,
so a public key cannot be misused as an HMAC secret.
"""

from __future__ import annotations

import functools
import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from tower.contract.failures import Code, TowerError, brief
from tower.contract.trust import (
    AttestClaims,
    Claims,
    EventClaims,
    Member,
    PublicKey,
    Roster,
    Signed,
)

DECISION_TYPE = "tower-decision+jwt"
EVENT_TYPE = "tower-event+jwt"
ATTEST_TYPE = "tower-attest+jwt"
ALGORITHMS = ("EdDSA", "Ed25519")  # RFC 8037's name and RFC 9864's fully specified one
SKEW_SECONDS = 60  # a signer's clock may run this far ahead of the run's
MAX_TOKEN_CHARS = 8000

C = TypeVar("C", bound=Signed)


class SignatureRefused(TowerError, ValueError):  # a ValueError: read with bad token values
    """A token that proves nothing: malformed, unknown key, bad signature, expired;
    ``code`` says which."""

    CODE = Code.BAD_SIGNATURE
    code: Code  # a refusal code

    def __init__(self, message: str, code: Code = Code.BAD_SIGNATURE) -> None:
        super().__init__(message, code=code)


@functools.cache
def _registry() -> Any:
    """joserfc's registry of algorithms, made when a token is first signed or read: joserfc
    and the cryptography it loads (~50 ms) are imported then, not by every process that
    imports the engine (a worker, `tower state`)."""
    from joserfc import jws

    class Registry(jws.JWSRegistry):
        """Only EdDSA/Ed25519. joserfc warns that "EdDSA" does not pin a curve (RFC 9864);
        our keys are always OKP Ed25519 (``PublicKey``), so it does."""

        def get_alg(self, name: str) -> Any:
            if name not in ALGORITHMS:
                raise SignatureRefused(f"algorithm {name!r} not accepted (use EdDSA)")
            return self.algorithms[name]

    return Registry(algorithms=list(ALGORITHMS))


def public_of(private: dict[str, Any]) -> PublicKey:
    public = {k: v for k, v in private.items() if k in ("kty", "crv", "x", "kid")}
    return PublicKey.model_validate({**public, "alg": "EdDSA", "use": "sig"})


def sign(claims: BaseModel, private: dict[str, Any], typ: str = DECISION_TYPE) -> str:
    """A compact JWS of ``claims`` under the private JWK (which names its ``kid``)."""
    from joserfc import jws
    from joserfc.jwk import OKPKey

    key = OKPKey.import_key({k: v for k, v in private.items() if k != "kid"})
    header = {"alg": "EdDSA", "kid": private["kid"], "typ": typ}
    payload = json.dumps(claims.model_dump(mode="json"), separators=(",", ":"), sort_keys=True)
    return jws.serialize_compact(header, payload, key, registry=_registry())


def verify(token: str, roster: Roster, claims_type: type[C], *, typ: str,
           now: float) -> tuple[C, Member, str]:
    """The claims of a token signed by a roster key, the member and the key id; or
    ``SignatureRefused`` saying why not (expiry checked against ``now``)."""
    from joserfc import jws
    from joserfc.errors import JoseError
    from joserfc.jwk import OKPKey

    if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS or token.count(".") != 2:
        raise SignatureRefused("malformed token: expected a compact JWS (three dot-separated "
                               "parts)", Code.MALFORMED)
    try:
        header = jws.extract_compact(token.encode()).headers()
    except (JoseError, ValueError) as exc:
        raise SignatureRefused(f"malformed token: {exc}", Code.MALFORMED) from None
    kid = header.get("kid")
    if not isinstance(kid, str):
        raise SignatureRefused("token has no key id (kid) in its header", Code.MALFORMED)
    if header.get("typ") != typ:
        raise SignatureRefused(f"token type {header.get('typ')!r} is not {typ!r}")
    found = roster.find(kid)
    if found is None:
        raise SignatureRefused(f"unknown key id {kid!r}: not in tenant {roster.tenant!r}'s "
                               "roster (revoked, another tenant's, or not yet added)",
                               Code.UNKNOWN_KEY)
    member, public = found
    try:
        key = OKPKey.import_key(public.model_dump(exclude={"kid", "alg", "use"},
                                                  exclude_none=True))
        obj = jws.deserialize_compact(token, key, algorithms=list(ALGORITHMS),
                                      registry=_registry())
    except SignatureRefused:
        raise
    except (JoseError, ValueError) as exc:
        raise SignatureRefused(f"invalid signature for key {kid!r}: {exc}") from None
    try:
        claims = claims_type.model_validate_json(obj.payload)
    except ValidationError as exc:
        raise SignatureRefused(f"bad claims: {brief(exc)}", Code.MALFORMED) from None
    if claims.exp <= now:
        raise SignatureRefused(f"token expired at {claims.exp} (now {int(now)})",
                               Code.TOKEN_EXPIRED)
    if claims.iat > now + SKEW_SECONDS:
        raise SignatureRefused(f"token issued in the future (iat {claims.iat}, now "
                               f"{int(now)})", Code.TOKEN_EXPIRED)
    return claims, member, kid


def verify_decision(token: str, roster: Roster, *, now: float) -> tuple[Claims, Member, str]:
    return verify(token, roster, Claims, typ=DECISION_TYPE, now=now)


def verify_event(token: str, roster: Roster, *, now: float) -> tuple[EventClaims, Member, str]:
    return verify(token, roster, EventClaims, typ=EVENT_TYPE, now=now)


def verify_attestation(token: str, roster: Roster, *, now: float) -> AttestClaims:
    """The claims of a worker's attestation, signed by a roster member that ``attests``."""
    claims, member, kid = verify(token, roster, AttestClaims, typ=ATTEST_TYPE, now=now)
    if not member.attests:
        raise SignatureRefused(f"key {kid!r} of {member.name} may not attest requests "
                               "(the roster does not say attests: true)",
                               Code.NOT_AUTHORIZED)
    if claims.tenant != roster.tenant:
        raise SignatureRefused(f"attestation for tenant {claims.tenant!r}, not "
                               f"{roster.tenant!r}", Code.WRONG_RUN)
    return claims


def authority(member: Member, sub: str, role: str) -> str | None:
    """Why ``member`` may not decide as ``sub`` with ``role`` (None: it may). A member's key
    decides as itself with its roles; an issuer's (``vouches_for``) as the user it vouches for."""
    if sub == member.name:
        if role in member.roles:
            return None
        return f"{member.name} does not hold role {role!r} (roster roles: " \
               f"{', '.join(member.roles) or 'none'})"
    if role in member.vouches_for:
        return None
    if member.vouches_for:
        return f"issuer {member.name} may not vouch for role {role!r} (vouches for: " \
               f"{', '.join(member.vouches_for)})"
    return f"key of {member.name} may not sign as {sub!r}"


def decision_claims(*, tenant: str, run: str, run_id: str, gate: str, request: int,
                    proposal: str, verdict: str, sub: str, role: str,
                    edits: dict[str, Any] | None = None, note: str = "",
                    jti: str, lifetime: int = 600, now: float) -> Claims:
    """Claims for a new decision issued at ``now``, valid for ``lifetime``; ``run_id``,
    ``request`` and ``proposal`` name the request the approver was shown."""
    at = int(now)
    return Claims(tenant=tenant, run=run, run_id=run_id, gate=gate, request=request,
                  proposal=proposal, verdict=verdict, sub=sub, role=role,  # type: ignore[arg-type]
                  edits=edits or {},
                  note=note, jti=jti, iat=at, exp=at + lifetime)

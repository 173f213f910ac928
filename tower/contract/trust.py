"""The deployment's trust data as it crosses into a run: roster, policy, and claims.

A run holds the roster and policy as a snapshot, which is public: a roster carries public
keys only (a JWK with a private part is refused).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

NAME = r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,99}$"
KID = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,99}$"


class PublicKey(BaseModel):
    """An Ed25519 public JWK (RFC 8037); ``extra="forbid"`` refuses a private ``d``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kty: Literal["OKP"]
    crv: Literal["Ed25519"]
    x: str = Field(pattern=r"^[A-Za-z0-9_-]{43}$", description="base64url public key")
    kid: str = Field(pattern=KID, description="key id, named in each token's header")
    alg: Literal["EdDSA", "Ed25519"] | None = None
    use: Literal["sig"] | None = None


class Member(BaseModel):
    """Someone (or something) the tenant trusts, and for what: ``roles`` at gates;
    ``vouches_for``, roles an issuer (an inbox that authenticated its user) may decide as for
    ``sub``; ``events``, agents it may send signed events to; ``attests``, a deployment's
    worker whose key vouches for pending requests (it decides nothing); ``keys``, its public
    keys (revoke one by removing it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=NAME)
    roles: list[str] = Field(default_factory=list)
    vouches_for: list[str] = Field(default_factory=list)
    events: list[str] = Field(default_factory=list)
    attests: bool = False
    keys: list[PublicKey] = Field(min_length=1)


class Roster(BaseModel):
    """A tenant's approvers, issuers and event senders (``<trust dir>/<tenant>/roster.json``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tenant: str = Field(min_length=1, max_length=200)
    members: list[Member] = Field(default_factory=list)

    def find(self, kid: str) -> tuple[Member, PublicKey] | None:
        for member in self.members:
            for key in member.keys:
                if key.kid == kid:
                    return member, key
        return None


class GatePolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    role: str | None = Field(default=None, description="overrides the gate's declared role")
    min_review_seconds: int = Field(default=0, ge=0, le=366 * 86400,
                                    description="a request stays open at least this long")


class Policy(BaseModel):
    """A tenant's rules (``<trust dir>/<tenant>/policy.json``); a run's input may tighten the
    agents' limits, never loosen them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tenant: str = Field(min_length=1, max_length=200)
    # A development convenience that weakens every gate: off unless the deployment says so.
    unsigned_allowed: bool = False
    # How often a run parked at a gate re-reads the roster (a revoked key stops working
    # within this time; `tower keys push` makes waiting runs re-read it at once).
    roster_refresh_seconds: int = Field(default=3600, ge=1, le=86400)
    # The longest a signed decision may live (exp - iat).
    max_decision_seconds: int = Field(default=3600, ge=1, le=7 * 86400)
    gates: dict[str, GatePolicy] = Field(default_factory=dict)
    # Per-agent limits, read by the agent's own policy model (e.g. refund: limit_cents).
    agents: dict[str, dict[str, Any]] = Field(default_factory=dict)


class TrustRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tenant: str
    agent: str


class TrustSnapshot(BaseModel):
    """What ``load_trust`` returns; the run verifies with it until the next refresh."""

    model_config = ConfigDict(frozen=True)

    roster: Roster
    policy: Policy
    digest: str  # of both files: a refresh that finds the same digest changes nothing


class Signed(BaseModel):
    """What every token's claims carry: id, issued, expiry (seconds). Strict: a value of the
    wrong JSON type is refused, never coerced."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    jti: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9._:-]+$")
    iat: int
    exp: int


class Claims(Signed):
    """A decision's JWS payload (see docs/approvals.md). ``jti`` is the decision id."""

    tenant: str = Field(min_length=1, max_length=200)
    run: str = Field(min_length=1, max_length=400, description="the workflow id")
    run_id: str = Field(min_length=1, max_length=100,
                        description="the Temporal run id the request was opened in")
    gate: str = Field(min_length=1, max_length=100)
    request: int = Field(ge=0, description="the step that opened the request")
    proposal: str = Field(pattern=r"^sha256:[0-9a-f]{64}$",
                          description="proposal_digest of the request shown")
    verdict: Literal["approve", "reject"]
    sub: str = Field(pattern=NAME, description="who decided")
    role: str = Field(min_length=1, max_length=50)
    edits: dict[str, Any] = Field(default_factory=dict)
    note: str = Field(default="", max_length=1000)


class EventClaims(Signed):
    """A signed event's JWS payload: the event itself, bound to one run and step."""

    tenant: str = Field(min_length=1, max_length=200)
    run: str = Field(min_length=1, max_length=400)
    agent: str = Field(min_length=1, max_length=100)
    sub: str = Field(pattern=NAME)
    event: dict[str, Any]


ATTEST_ACTIVITY = "tower_attest"  # the activity a gate asks (tower/activities/trust.py)


class AttestRequest(BaseModel):
    """What a run asks its worker to vouch for when a gate opens (``tower_attest``)."""

    tenant: str = Field(min_length=1, max_length=200)
    run_id: str = Field(min_length=1, max_length=100)
    gate: str = Field(min_length=1, max_length=100)
    step: int = Field(ge=0)
    proposal: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    expires_at: int  # seconds: the request's expiry; the attestation lasts as long


class AttestClaims(Signed):
    """A worker's attestation (``tower-attest+jwt``): a real pending request of a run this
    deployment's worker serves."""

    tenant: str = Field(min_length=1, max_length=200)
    run: str = Field(min_length=1, max_length=400, description="the workflow id")
    run_id: str = Field(min_length=1, max_length=100)
    gate: str = Field(min_length=1, max_length=100)
    step: int = Field(ge=0)
    agent: str = Field(min_length=1, max_length=100, description="the workflow type")
    task_queue: str = Field(min_length=1, max_length=200)
    proposal: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    # The Temporal run id of the execution that asked (the activity's own info, not the
    # request): a new execution under the same workflow id carrying this token is refused.
    # Empty in attestations made before it was named: those are not listed.
    execution: str = Field(default="", max_length=100)

"""The records of approval: decisions and gate requests; pure pydantic, no engine imports,
so the state can carry them and the CLI can build them."""

from __future__ import annotations

import hashlib
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

import rfc8785
from pydantic import BaseModel, ConfigDict, Field

from tower.contract.failures import Code, TowerError
from tower.contract.pending import EditLimit, PendingView

DIGEST = r"^sha256:[0-9a-f]{64}$"


class Verdict(StrEnum):
    APPROVE = "approve"
    REJECT = "reject"


class Decision(BaseModel):
    """An approve/reject decision as the run records it, once its signature checked out:
    with the signing key's id (``kid``) and the request it answers (its step ``request``, the
    Temporal ``run_id`` it was opened in, the ``proposal`` digest)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    decision_id: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9._:-]+$")
    tenant: str = Field(min_length=1, max_length=200)
    run: str = Field(min_length=1, max_length=400)
    gate: str = Field(min_length=1, max_length=100)
    decision: Verdict
    approver: str = Field(min_length=1, max_length=100)
    role: str = Field(min_length=1, max_length=50)
    expires_at: datetime
    note: str = Field(default="", max_length=1000)
    edits: dict[str, Any] = Field(default_factory=dict)
    kid: str | None = Field(default=None, max_length=100)  # signing key (None: unsigned)
    request: int  # the step that opened the request it answers
    run_id: str = Field(max_length=100)  # the run it was opened in
    proposal: str = Field(pattern=DIGEST)  # proposal_digest of it

    @property
    def signed(self) -> bool:
        return self.kid is not None


class SignedDecision(BaseModel):
    """A decision on the wire (``decide``'s and ``decision``'s argument): ``token``, a JWS
    by a roster key; or, where the deployment allows it (development), ``unsigned`` claims."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    token: str | None = Field(default=None, max_length=8000)
    unsigned: dict[str, Any] | None = None


class GateStatus(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    STALE = "stale"


class GateRecord(BaseModel):
    """One approval request and how it ended. Lives in the state; only the engine writes it."""

    model_config = ConfigDict(frozen=True)

    gate: str
    node: str
    when: Literal["before", "after"]
    visit: int
    step: int
    role: str
    # The Temporal run id the request was opened in, as that run recorded it: a request
    # carried over by continue-as-new keeps it (docs/approvals.md).
    run_id: str
    proposal: dict[str, Any] = Field(default_factory=dict)
    editable: list[str] = Field(default_factory=list)
    limits: dict[str, EditLimit] = Field(default_factory=dict)  # how each may be edited
    requested_at: datetime
    expires_at: datetime
    status: GateStatus = GateStatus.PENDING
    decision: Decision | None = None
    reason: str = ""  # why it expired or went stale


class ProposalNotCanonical(TowerError, ValueError):  # a ValueError: as JSON's own encoders
    """A proposal RFC 8785 cannot canonicalize (an integer beyond ±(2**53-1), NaN, an
    infinity): no client in another language could compute its digest."""

    CODE = Code.MALFORMED


def canonical_proposal(record: GateRecord) -> dict[str, Any]:
    """What an approver decides, as one JSON object: every surface shows it whole
    (``tower.contract.render``), every signer digests it and a waiting run's memo carries it."""
    return {"v": 1, "gate": record.gate, "node": record.node, "when": record.when,
            "proposal": record.proposal, "editable": sorted(record.editable),
            "limits": {k: v.model_dump(mode="json") for k, v in record.limits.items()}}


def same_request(record: GateRecord, view: PendingView) -> bool:
    """``record`` (what the run's query says waits) is the request ``view`` published: same
    gate, step, node, role, editable fields and whole canonical proposal. A surface signs a
    decision only on a request that passes this."""
    return ((record.gate, record.step, record.node, record.role, record.editable)
            == (view.gate, view.step, view.node, view.role, view.editable)
            and canonical_proposal(record) == view.shown)


def canonical_bytes(record: GateRecord) -> bytes:
    """``canonical_proposal`` in RFC 8785 (JCS) form, every empty array written ``null``."""
    return _jcs(canonical_proposal(record))


def _jcs(canonical: dict[str, Any]) -> bytes:
    try:
        return rfc8785.dumps(_empty_as_null(canonical))
    except rfc8785.CanonicalizationError as exc:
        raise ProposalNotCanonical(f"the proposal cannot be canonicalized (RFC 8785): "
                                   f"{exc}") from None


def _empty_as_null(value: Any) -> Any:
    """``value`` with every empty array as ``null``: the `temporal` CLI prints one so, and a
    client reading either spelling gets the same bytes."""
    if isinstance(value, dict):
        return {k: _empty_as_null(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_empty_as_null(v) for v in value] or None
    return value


def digest_of(canonical: dict[str, Any]) -> str:
    """``proposal_digest`` of a canonical proposal read back from JSON (a memo, a notice)."""
    return "sha256:" + hashlib.sha256(_jcs(canonical)).hexdigest()


def proposal_digest(record: GateRecord) -> str:
    """``sha256:`` and the hex SHA-256 of ``canonical_bytes``: what a decision names. Any
    client computes it alike (docs/approvals.md gives the steps and a test vector)."""
    return digest_of(canonical_proposal(record))

"""The records of approval: decisions and gate requests; pure pydantic, no engine imports,
so the state can carry them and the CLI can build them."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Verdict(StrEnum):
    APPROVE = "approve"
    REJECT = "reject"


class Decision(BaseModel):
    """An approve/reject decision as the run records it, once its signature checked out.

    Signed decisions arrive as a JWS (``SignedDecision``, docs/approvals.md) and are
    recorded with the signing key's id in ``kid`` and the request they answer in
    ``request``. Runs started before signed decisions received this model itself, with
    an HMAC ``signature`` (tower/core/legacy_trust.py).
    """

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
    signature: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")  # legacy HMAC
    kid: str | None = Field(default=None, max_length=100)  # the key that signed it
    request: int | None = None  # the step that opened the request it answers

    @property
    def signed(self) -> bool:
        return self.kid is not None or self.signature is not None


class SignedDecision(BaseModel):
    """A decision on the wire (the ``decide`` update's and ``decision`` signal's argument):
    ``token``, a JWS signed by a roster key; or, only where the deployment allows unsigned
    decisions (development), ``unsigned`` claims in the clear."""

    model_config = ConfigDict(extra="forbid", frozen=True)

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
    proposal: dict[str, Any] = Field(default_factory=dict)
    editable: list[str] = Field(default_factory=list)
    requested_at: datetime
    expires_at: datetime
    status: GateStatus = GateStatus.PENDING
    decision: Decision | None = None
    reason: str = ""  # why it expired or went stale

"""What a run parking at a gate tells the tenant's approvers (the ``notify_gate`` activity)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class NotifyPolicy(BaseModel):
    """Where a tenant's approvers hear that a run waits (``<trust dir>/<tenant>/notify.json``);
    read at send time, never in a run: a webhook URL is itself a secret."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(pattern=r"^https?://", max_length=2000)
    format: Literal["slack", "json"] = "slack"
    inbox_url: str | None = Field(default=None, pattern=r"^https?://", max_length=500,
                                  description="the tenant's inbox, for links to decide")


class GateNotice(BaseModel):
    """Input of the ``notify_gate`` activity: who is asked to decide what."""

    model_config = ConfigDict(frozen=True)

    tenant: str
    run: str
    agent: str
    gate: str
    role: str
    node: str
    expires_at: datetime
    proposal: dict[str, Any] = Field(default_factory=dict)  # whole (earlier runs: cut)
    # The canonical proposal (tower.contract.decisions.canonical_proposal), whole: what the
    # notification renders. Empty in notices of runs recorded before it was sent.
    shown: dict[str, Any] = Field(default_factory=dict)

"""What a run waiting at a gate publishes for approvers, in its memo and search attributes.

The inbox (and ``tower pending``) list waiting runs from Temporal's visibility store
alone, so they work while no worker answers queries. Nothing here can authorize
anything: it is what the history already shows, cut to a bounded size.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_TEXT = 200  # each proposal value and note in the memo, in characters (history has all)
MAX_EARLIER = 5  # earlier decisions kept in the memo


class EditLimit(BaseModel):
    """The bounds an approver's edit must stay within (checked again by the gate)."""

    model_config = ConfigDict(frozen=True)

    min: float | None = None
    max: float | None = None
    rule: str = ""  # shown beside the input, e.g. "lower only"


class EditableField(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    type: Literal["int", "float", "str", "bool"]
    value: Any = None
    limit: EditLimit = Field(default_factory=EditLimit)


class EarlierDecision(BaseModel):
    model_config = ConfigDict(frozen=True)

    gate: str
    status: str
    approver: str = ""
    role: str = ""
    note: str = ""
    reason: str = ""
    requested_at: datetime


class PendingView(BaseModel):
    """One pending request as approvers see it: the memo ``search.PENDING_MEMO``.

    ``agent``, ``fields`` and ``earlier`` came with the inbox: a run that parked before
    publishes none of them (the inbox then takes the agent from its search attributes).
    """

    model_config = ConfigDict(frozen=True)

    gate: str
    node: str
    when: Literal["before", "after"]
    step: int
    role: str
    requested_at: datetime
    expires_at: datetime
    proposal: dict[str, str] = Field(default_factory=dict)  # values as text, cut to MAX_TEXT
    editable: list[str] = Field(default_factory=list)  # the names approvers may change
    agent: str = ""
    fields: list[EditableField] = Field(default_factory=list)  # each editable, typed, bounded
    earlier: list[EarlierDecision] = Field(default_factory=list)
    # The deployment's worker vouching for this request (tower/activities/attest.py), and
    # the proposal_digest it names: listings show only requests whose attestation verifies.
    proposal_digest: str = ""
    attestation: str = Field(default="", max_length=4000)



def short_values(values: Mapping[str, Any]) -> dict[str, str]:
    """``values`` as text, each cut to ``MAX_TEXT`` characters (the history has them whole)."""
    return {k: short(str(v)) for k, v in values.items()}


def short(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"

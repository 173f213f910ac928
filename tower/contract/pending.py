"""What a run waiting at a gate publishes for approvers, in its memo and search attributes,
so the inbox and ``tower pending`` list it from visibility alone, without a worker. It can
authorize nothing. The request is whole (``shown``, what ``proposal_digest`` hashes); only
earlier decisions' notes are cut.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tower.contract.render import Rendered, render_proposal

MAX_TEXT = 200  # each earlier decision's note and reason in the memo (history has all)
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
    """One pending request as approvers see it: the memo ``search.PENDING_MEMO``."""

    model_config = ConfigDict(frozen=True)

    gate: str
    node: str
    when: Literal["before", "after"]
    step: int
    role: str
    requested_at: datetime
    expires_at: datetime
    # The proposal's values as text, whole. Read from ``shown`` when the memo has it (what
    # a memo says beside it is ignored): nothing shown can differ from what is hashed.
    proposal: dict[str, str] = Field(default_factory=dict)
    editable: list[str] = Field(default_factory=list)  # the names approvers may change
    agent: str = ""
    fields: list[EditableField] = Field(default_factory=list)  # each editable, typed, bounded
    earlier: list[EarlierDecision] = Field(default_factory=list)
    # The deployment's worker vouching for this request (tower/activities/trust.py), and
    # the proposal_digest it names: listings show only requests whose attestation verifies.
    proposal_digest: str = ""
    attestation: str = Field(default="", max_length=4000)
    # The canonical proposal (tower.contract.decisions.canonical_proposal), whole: what is
    # rendered and what the attested digest must be the digest of. Empty in the memos of
    # runs that parked before it was published (those are not listed).
    shown: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _proposal_from_shown(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("shown"), dict):
            values = data["shown"].get("proposal")
            if isinstance(values, dict):
                data = {**data, "proposal": {str(k): v if isinstance(v, str) else json.dumps(
                    v, sort_keys=True, ensure_ascii=False) for k, v in values.items()}}
        return data

    def rendered(self) -> Rendered:
        """The request as every surface shows it: ``shown``, or what an older memo says
        (never listed as genuine)."""
        return render_proposal(self.shown or {
            "gate": self.gate, "node": self.node, "when": self.when,
            "proposal": self.proposal, "editable": self.editable})

    def memo(self) -> dict[str, Any]:
        """The run's memo: the proposal only in ``shown`` when there is one."""
        return self.model_dump(mode="json", exclude={"proposal"} if self.shown else {"shown"})


def short(text: str) -> str:
    """An earlier decision's note or reason, cut to ``MAX_TEXT`` (never a proposal's)."""
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"

"""Build a run's ``PendingView`` (what approvers see) from its machine and state. Pure."""

from __future__ import annotations

from typing import Any

from tower.contract.decisions import GateStatus, canonical_proposal
from tower.contract.pending import (
    MAX_EARLIER,
    EarlierDecision,
    EditableField,
    EditLimit,
    PendingView,
    short,
)
from tower.core.gates import pending_record
from tower.core.graph import Machine
from tower.core.state import AgentState

_TYPES = {int: "int", float: "float", str: "str", bool: "bool"}


def pending_view(machine: Machine, state: AgentState) -> PendingView | None:
    """The pending request of ``state`` as approvers see it, with its canonical proposal
    (``shown``), or None when nothing waits."""
    record = pending_record(state)
    if record is None:
        return None
    fields = [EditableField(name=name, type=field_type(machine, name),
                            value=getattr(state, name, None),
                            limit=record.limits.get(name, EditLimit()))
              for name in record.editable]
    earlier = [EarlierDecision(
        gate=r.gate, status=r.status.value, requested_at=r.requested_at,
        reason=short(r.reason), approver=r.decision.approver if r.decision else "",
        role=r.decision.role if r.decision else "",
        note=short(r.decision.note) if r.decision else "")
        for r in state.approvals if r.status != GateStatus.PENDING][-MAX_EARLIER:]
    return PendingView(
        agent=machine.name, node=record.node, gate=record.gate, when=record.when,
        role=record.role, step=record.step, requested_at=record.requested_at,
        expires_at=record.expires_at, editable=list(record.editable), fields=fields,
        earlier=earlier, shown=canonical_proposal(record))


def field_type(machine: Machine, name: str) -> Any:
    """The input type of a state field: int, float, str or bool (str when unsure)."""
    info = machine.state_type.model_fields.get(name)
    return _TYPES.get(info.annotation, "str") if info is not None else "str"  # type: ignore[arg-type]

"""The typed state of a run and the reducers that merge node updates into it. Pure: a
node never mutates the state; it returns an update and each field's reducer merges it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tower.contract.decisions import GateRecord
from tower.contract.failures import Code, TowerError
from tower.contract.messages import Message, Status, Usage


@dataclass(frozen=True)
class Reducer:
    """How an update's value merges into a field: ``fn(old, new) -> merged``."""

    name: str
    fn: Callable[[Any, Any], Any]


APPEND = Reducer("append", lambda old, new: [*old, *(new if isinstance(new, list | tuple)
                                                      else [new])])
ADD = Reducer("add", lambda old, new: old + new)
REPLACE = Reducer("replace", lambda old, new: new)


def custom(fn: Callable[[Any, Any], Any], name: str | None = None) -> Reducer:
    return Reducer(name or str(getattr(fn, "__name__", "custom")), fn)


def _add_by_key(old: dict[str, Usage], new: dict[str, Usage]) -> dict[str, Usage]:
    merged = dict(old)
    for key, usage in new.items():
        merged[key] = merged.get(key, Usage()) + Usage.model_validate(usage)
    return merged


ADD_BY_KEY = Reducer("add_by_key", _add_by_key)


class NodeError(BaseModel):
    """The most recent error a node raised: what a recovery node (or an operator) reads."""

    model_config = ConfigDict(frozen=True)

    node: str
    error: str
    step: int


class AgentState(BaseModel):
    """Base of every agent's state. Subclasses add their own typed fields."""

    model_config = ConfigDict(extra="forbid")

    messages: Annotated[list[Message], APPEND] = Field(default_factory=list)
    errors: Annotated[list[str], APPEND] = Field(default_factory=list)
    usage: Annotated[Usage, ADD] = Field(default_factory=Usage)
    # The same spend, per node: what each state of the machine cost.
    node_usage: Annotated[dict[str, Usage], ADD_BY_KEY] = Field(default_factory=dict)
    # Owned by the engine: a node's update can never set these.
    step: int = 0
    node: str = "START"
    status: Status = Status.RUNNING
    visits: dict[str, int] = Field(default_factory=dict)
    # Approval requests and decisions: written by the gate runtime only, never by a
    # node's update, a tool's output or an approver's edits.
    approvals: list[GateRecord] = Field(default_factory=list)
    last_error: NodeError | None = None
    # The deployment let this run accept UNSIGNED decisions (a development setting).
    unsigned_decisions: bool = False


PROTECTED_FIELDS = frozenset({"step", "node", "status", "visits", "approvals", "last_error",
                              "unsigned_decisions"})


class UpdateError(TowerError, ValueError):  # a ValueError: pydantic validators raise it
    """A node returned an update that cannot be applied; the state is unchanged."""

    CODE = Code.BAD_UPDATE


# Any agent's state: the engine hands back the state type it was given.
S = TypeVar("S", bound=AgentState)


def apply_update(state: S, update: Mapping[str, Any]) -> S:
    """A new state with ``update`` merged through each field's reducer; UpdateError naming
    the field (unknown, protected, or failing validation), ``state`` untouched."""
    state_type = type(state)
    # Read once: pydantic's class property costs more than the rest of a field's merge.
    fields = state_type.model_fields
    # The instance's own field values (and extras, if a state allows them): iterating the
    # model goes through a generator per field, a fifth of a replayed update's merge.
    merged: dict[str, Any] = {**state.__dict__, **(state.model_extra or {})}
    for field, value in update.items():
        info = fields.get(field)
        if info is None:
            raise UpdateError(f"update names unknown field {field!r} of {state_type.__name__}")
        if field in PROTECTED_FIELDS:
            raise UpdateError(f"update may not set protected field {field!r}")
        try:
            reducer = next((m for m in info.metadata if isinstance(m, Reducer)), REPLACE)
            merged[field] = reducer.fn(merged[field], value)
        except Exception as exc:  # a reducer given a value of the wrong shape
            raise UpdateError(f"cannot merge field {field!r}: {exc}") from exc
    try:
        return state_type.model_validate(merged)
    except ValidationError as exc:
        raise UpdateError(f"update does not fit {state_type.__name__}: {exc}") from exc


def set_engine_fields(state: S, **fields: Any) -> S:
    """The engine's own way to move step, node, status, visits, approvals and last_error."""
    return state.model_copy(update=fields)


class CallUsage(BaseModel):
    """One model call's spend. The model activity prices each call, so its figure is in the
    history and replays unchanged."""

    model_config = ConfigDict(frozen=True)

    step: int
    node: str
    model: str
    usage: Usage


def cost_report(state: AgentState, calls: list[CallUsage]) -> dict[str, Any]:
    """The ``cost`` query's answer: the run's total, each node's and each call's."""
    return {
        "run": _figures(state.usage),
        "nodes": {node: _figures(u) for node, u in sorted(state.node_usage.items())},
        "calls": [{"step": c.step, "node": c.node, "model": c.model, **_figures(c.usage)}
                  for c in calls],
    }


def _figures(u: Usage) -> dict[str, Any]:
    return {"calls": u.calls, "prompt_tokens": u.prompt_tokens,
            "completion_tokens": u.completion_tokens, "tokens": u.tokens,
            "cost_usd": round(u.cost_usd, 8)}

"""A side-effecting tool: the user's business function, made exactly-once by Tower.

Its activity (``tool.on(db)``) runs in ONE transaction of ``db``: the record (a key made
before returns its first result), the fence (the attempt claims the key with its epoch;
one given up on fails), the user's function (its invariant and its write), the record of
the result. Called with ``reconcile=True`` it claims the key with a later epoch and reads
what was made: once it says "nothing", no attempt given up on can make it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import to_jsonable_python
from temporalio import activity

from tower.contract.failures import Code, EffectRefused, TowerError, failure
from tower.contract.wire import Authority, ToolCall
from tower.effects._guard import MARK
from tower.effects._ledger import claim, epoch_now, record

A = TypeVar("A", bound=BaseModel)


class NoEffect(TowerError):  # noqa: N818 (an outcome, not an error)
    """The tool decided not to act (out of stock): its transaction rolls back and the key
    stays free, so a later repeat really tries again. The call returns ``result``."""

    CODE = Code.NO_EFFECT

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(str(result))
        self.result = result


@dataclass(frozen=True)
class EffectCall:
    """What a tool knows of the call besides its arguments."""

    tool: str
    key: str  # the logical action's idempotency key (tower/core/keys.py)
    authority: Authority  # what the run's recorded state allows (its limit, the approval)

    @property
    def id(self) -> str:
        """12 hex digits, the same for every repeat of the action: for the ids it makes."""
        return hashlib.sha256(self.key.encode()).hexdigest()[:12]

    def approved(self, field: str) -> Any:
        """What the approval of this action set ``field`` to (None: no approval)."""
        return self.authority.approved.get(field) if self.authority.decision_id else None


class Database(Protocol):
    """Where effects commit: ``tower.effects.SQLite`` or ``tower.effects.Postgres``."""

    for_update: str

    def run(self, work: Callable[[Any], Any]) -> Any: ...


Fn = Callable[[Any, A, EffectCall], dict[str, Any]]


@dataclass(frozen=True)
class EffectTool(Generic[A]):
    """A side-effecting tool; ``on(db)`` is its Temporal activity (named ``name``)."""

    name: str
    args: type[A]
    fn: Fn[A]

    def on(self, db: Database) -> Callable[[ToolCall], dict[str, Any] | None]:
        """The activity that runs this tool's effects in ``db``, exactly once per key."""
        def run(call: ToolCall) -> dict[str, Any] | None:
            if call.reconcile:
                return reconcile(db, call.idempotency_key)
            return self.call(db, call)

        # Activity names are part of the history's contract: keep them stable (the
        # function's, as the SDK and TowerPlugin name an activity).
        run.__name__ = run.__qualname__ = self.name
        setattr(run, MARK, True)  # it answers ``reconcile`` itself (_guard.py)
        return activity.defn(run)

    def call(self, db: Database, call: ToolCall, *, epoch: int | None = None
             ) -> dict[str, Any]:
        """Make the effect (or return the one made under the call's key)."""
        args = arguments(self.name, self.args, call)
        asked = json.dumps(args.model_dump(mode="json"), sort_keys=True)
        context = EffectCall(self.name, call.idempotency_key, call.authority)
        mine = epoch_now() if epoch is None else epoch

        def work(db_tx: Any) -> dict[str, Any]:
            made = claim(db_tx, call.idempotency_key, mine, db.for_update)
            if made is not None:
                return made
            result = to_jsonable_python(self.fn(db_tx, args, context))
            record(db_tx, call.idempotency_key, self.name, asked, result)
            return dict(result)

        try:
            return dict(db.run(work))
        except NoEffect as nothing:  # rolled back: no effect, the key stays free
            return dict(to_jsonable_python(nothing.result))
        except EffectRefused as refused:  # rolled back; the node gets EffectRefused back
            refused.tool = self.name
            raise failure(refused) from None


def arguments(tool: str, model: type[A], call: ToolCall) -> A:
    """The call's arguments as ``model``; a final failure when they do not fit (retrying
    cannot fix them)."""
    try:
        return model.model_validate(call.arguments)
    except ValidationError as exc:
        raise failure(TowerError(f"bad arguments for {tool}: {exc}",
                                 code=Code.BAD_TOOL_ARGUMENTS)) from None


def reconcile(db: Database, key: str, epoch: int | None = None) -> dict[str, Any] | None:
    """The effect made under ``key``, if any, after fencing off every earlier attempt:
    once this returns None, no attempt given up on can make it any more."""
    mine = epoch_now() if epoch is None else epoch
    result: dict[str, Any] | None = db.run(lambda tx: claim(tx, key, mine, db.for_update))
    return result


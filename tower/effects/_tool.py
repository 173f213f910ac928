"""A side-effecting tool: the user's business function, made exactly-once by Tower.

Its activity (``tool.on(db)``) runs in ONE transaction of ``db``: the record (a key made
before returns its first result), the fence (the attempt claims the key with its epoch;
one given up on fails), the user's function (its invariant and its write), the record of
the result. Called with ``reconcile=True`` it claims the key with a later epoch and reads
what was made: once it says "nothing", no attempt given up on can make it.

The bookkeeping is one row per key in ``tower_effects`` (the owning attempt's epoch, then
the tool, its arguments and its result), in SQL that SQLite and PostgreSQL both take.
A tool's activity is made from its object (``tower.core.tools.Tool``) and what it is bound
to: a side effect runs exactly once per action in its database; a read on a
``tower.effects`` database without its write lock; any other resource is given as it is.

Only a ``tower.effects`` tool is ever asked to reconcile: a tool written without it would
take that for a new call (the payment made again), so ``TowerPlugin`` puts a guard on every
worker (``OnlyEffectsReconcile``): a reconcile call reaches only an activity
``EffectTool.on`` made (``MARK``); any other fails, not retryable, before it runs
(``Code.NOT_AN_EFFECT``).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, Protocol, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import to_jsonable_python
from temporalio import activity
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from tower.contract.failures import Code, EffectRefused, TowerError, failure
from tower.contract.wire import Authority, ToolCall
from tower.core.tools import Tool

A = TypeVar("A", bound=BaseModel)
MARK = "__tower_effect__"  # set on the activities EffectTool.on makes
UNBOUND = object()

TABLE = """CREATE TABLE IF NOT EXISTS tower_effects (
    idempotency_key TEXT PRIMARY KEY, epoch BIGINT NOT NULL, tool TEXT, arguments TEXT,
    result TEXT)"""


class Cursor(Protocol):
    def fetchone(self) -> Any: ...


class Tx(Protocol):
    """An open write transaction (``?`` placeholders on every backend)."""

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> Cursor: ...


def claim(tx: Tx, key: str, epoch: int, for_update: str = "") -> dict[str, Any] | None:
    """Own ``key`` for ``epoch`` inside ``tx``; the result of the effect made under it, if
    any (the key alone decides). An attempt that finds a later epoch was given up on: it
    fails, non-retryable, and changes nothing."""
    tx.execute("INSERT INTO tower_effects (idempotency_key, epoch) VALUES (?, ?) "
               "ON CONFLICT (idempotency_key) DO NOTHING", (key, epoch))
    owner, result = tx.execute(
        "SELECT epoch, result FROM tower_effects WHERE idempotency_key=?" + for_update,
        (key,)).fetchone()
    if result is not None:
        return dict(json.loads(result))
    if int(owner) > epoch:
        raise failure(TowerError(
            f"fenced off: a later attempt (or the run's reconciliation) owns {key}; this "
            "attempt was given up on and changes nothing", code=Code.FENCED_OFF))
    tx.execute("UPDATE tower_effects SET epoch=? WHERE idempotency_key=?", (epoch, key))
    return None


def record(tx: Tx, key: str, tool: str | None, arguments: str | None,
           result: dict[str, Any]) -> None:
    tx.execute("UPDATE tower_effects SET tool=?, arguments=?, result=? WHERE idempotency_key=?",
               (tool, arguments, json.dumps(result, sort_keys=True), key))


def epoch_now() -> int:
    """This attempt's epoch: when Temporal scheduled it (µs), so a later attempt always has
    a larger one; outside an activity (a unit test) the wall clock."""
    if activity.in_activity():
        return int(activity.info().current_attempt_scheduled_time.timestamp() * 1_000_000)
    return time.time_ns() // 1000


def waited(what: str) -> None:
    """Between two tries for the lock: heartbeat, and stop when cancelled or near this
    attempt's deadline (a slow lock is a retryable failure, never a zombie that commits after
    the run gave up on it)."""
    if not activity.in_activity():
        return
    activity.heartbeat(what)
    if activity.is_cancelled():
        raise failure(TowerError(f"cancelled while {what}", code=Code.TOOL_BUSY))
    info = activity.info()
    timeout = info.start_to_close_timeout
    if timeout is None:
        return
    deadline = info.started_time + timeout - min(timedelta(seconds=1), timeout / 5)
    if datetime.now(deadline.tzinfo) >= deadline:
        raise failure(TowerError(f"still {what} at this attempt's deadline; nothing was done",
                                 code=Code.TOOL_BUSY))


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
            return reconcile(db, call.idempotency_key) if call.reconcile else self.call(db, call)

        setattr(run, MARK, True)  # it answers ``reconcile`` itself (OnlyEffectsReconcile)
        return named_activity(run, self.name)

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
    return db.run(lambda tx: claim(tx, key, mine, db.for_update))


def invoke(tool: Tool, resource: Any, args: BaseModel, call: EffectCall) -> Any:
    """``tool``'s implementation on what it takes: ([resource,] args[, call])."""
    head = () if tool.resource is None else (resource,)
    return tool.fn(*head, args, *((call,) if tool.takes_call else ()))


def effect_of(tool: Tool) -> EffectTool[Any]:
    """A side-effecting ``tool`` as a ``tower.effects`` tool: exactly once per key."""
    return EffectTool(tool.name, tool.args, lambda tx, args, call: invoke(tool, tx, args, call))


def activity_for(tool: Tool, bound: Any = UNBOUND) -> Callable[..., Any]:
    """The activity that runs ``tool`` with ``bound`` (what its resource parameter gets)."""
    if tool.side_effect:
        return effect_of(tool).on(bound)
    # On a tower.effects database: its ``read`` (no write lock), else a transaction of its own.
    on_db = getattr(bound, "read", None) or (getattr(bound, "run", None)
                                             if hasattr(bound, "for_update") else None)

    def prepare(call: ToolCall) -> tuple[BaseModel, EffectCall]:
        return (arguments(tool.name, tool.args, call),
                EffectCall(tool.name, call.idempotency_key, call.authority))

    if inspect.iscoroutinefunction(tool.fn):
        async def run_async(call: ToolCall) -> Any:
            args, context = prepare(call)
            return to_jsonable_python(await invoke(tool, bound, args, context))

        return named_activity(run_async, tool.name)

    def run_sync(call: ToolCall) -> Any:
        args, context = prepare(call)
        if on_db is not None:
            return to_jsonable_python(on_db(lambda tx: invoke(tool, tx, args, context)))
        return to_jsonable_python(invoke(tool, bound, args, context))

    return named_activity(run_sync, tool.name)


def named_activity(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``fn`` as the activity ``name``. Activity names are part of the history's contract:
    stable, the function's (as the SDK and TowerPlugin name an activity)."""
    fn.__name__ = fn.__qualname__ = name
    return activity.defn(fn)


def run_tool(tool: Tool, bound: Any, call: ToolCall, *, epoch: int | None = None) -> Any:
    """``tool`` on ``bound``, called as its activity would be (a test's direct call): a side
    effect exactly once per ``call.idempotency_key`` (``epoch``: the attempt's, for tests of
    the fence); a refusal raises the failure of an ``EffectRefused``."""
    if tool.side_effect:
        return effect_of(tool).call(bound, call, epoch=epoch)
    return activity_for(tool, bound)(call)


def asks_reconcile(args: Any) -> bool:
    """Whether an activity's input is a reconcile call (a ``ToolCall``, or its dict)."""
    return any(getattr(arg, "reconcile", None) is True
               or (isinstance(arg, dict) and arg.get("reconcile") is True) for arg in args)


class OnlyEffectsReconcile(Interceptor):
    """Fails a reconcile call to an activity that is not a ``tower.effects`` tool."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Inbound(next)


class _Inbound(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        if asks_reconcile(input.args) and getattr(input.fn, MARK, False) is not True:
            name = getattr(input.fn, "__name__", "?")
            raise failure(TowerError(
                f"{name} is declared a side effect but its activity is not a tower.effects "
                "tool: it cannot say whether it acted, so it was not called again (that "
                "would act twice). Make it @tool(side_effect=True) to have the run "
                "reconcile it", code=Code.NOT_AN_EFFECT))
        return await super().execute_activity(input)

"""The checker's worker: the real ``worker.py`` with ``issue_refund`` held to a 2 s timeout
and 2 attempts, so a database locked for a few seconds straddles the tool's timeouts and
its give-up (a trial lasts seconds, not the production minute). Everything else is as
shipped, with two test-only settings of this module (never read by the library):

- ``JEPSEN_PG``: the refunds are made on this PostgreSQL database (``tower.effects.Postgres``)
  instead of the tools' SQLite file — the same tool, the same guard;
- ``JEPSEN_KILLS``: a folder where a trial arms SIGKILLs of this process at the points of an
  effect (kills.py): a file ``<invoice>.<point>`` there is taken (renamed ``.fired``, with
  this process's pid in it) by the first effect on that invoice reaching that point, which
  then kills its own worker.

``python -m tests.jepsen.worker --forks`` starts no worker itself: it forks one per line it
reads (that worker's log file) and answers the worker's pid (world.py's ``Zygote``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from temporalio import activity

from activities.tools import billing
from tower import Tool
from tower.contract.wire import ToolCall
from tower.effects import Postgres
from tower.effects._tool import MARK, Database, EffectTool, effect_of
from tower.temporal import worker as tower_worker

TOOL_TIMEOUT_SECONDS = 2.0
TOOL_ATTEMPTS = 2
KILLS = os.environ.get("JEPSEN_KILLS", "")
# The refunds' tables on PostgreSQL (the SQLite file has them from the example's schema).
PG_SCHEMA = """CREATE TABLE IF NOT EXISTS invoices (id TEXT PRIMARY KEY, account_id TEXT NOT NULL,
    amount_cents BIGINT NOT NULL, status TEXT NOT NULL, issued_on TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS refunds (id TEXT PRIMARY KEY, invoice_id TEXT,
    amount_cents BIGINT NOT NULL, reason TEXT NOT NULL, idempotency_key TEXT NOT NULL UNIQUE)"""


def fired_name(armed: Path) -> Path:
    """Where a kill armed at ``armed`` goes once taken (with the taker's pid in it)."""
    return armed.with_name(armed.name + ".fired")


def die_at(point: str, invoice: str) -> None:
    """SIGKILL this process if a kill at ``point`` is armed for ``invoice`` (taking it)."""
    if not KILLS:
        return
    armed = Path(KILLS) / f"{invoice}.{point}"
    try:
        armed.rename(fired_name(armed))
    except FileNotFoundError:
        return
    fired_name(armed).write_text(str(os.getpid()))
    os.kill(os.getpid(), signal.SIGKILL)


@dataclasses.dataclass
class Killing:
    """A ``Database`` that dies, when armed, just before Tower's transaction commits (the
    claim, the write and the record made, none committed)."""

    inner: Database
    invoice: Callable[[], str]
    for_update: str = ""

    def __post_init__(self) -> None:
        self.for_update = self.inner.for_update

    def run(self, work: Callable[[Any], Any]) -> Any:
        def then_die(tx: Any) -> Any:
            out = work(tx)
            die_at("before-commit", self.invoice())
            return out
        return self.inner.run(then_die)


def refund_activity(tool: Tool, db: Database) -> Callable[[ToolCall], Any]:
    """``issue_refund`` on ``db``, with the kill points around and inside its effect."""
    calling = threading.local()  # the invoice of this thread's call (activities: threads)
    plain = effect_of(tool)

    def business(tx: Any, args: Any, call: Any) -> dict[str, Any]:
        die_at("holding-lock", args.invoice_id)  # claimed, under the lock, nothing written
        out = plain.fn(tx, args, call)
        die_at("after-write", args.invoice_id)  # the refund written, Tower's record not
        return out

    killing = Killing(db, lambda: str(getattr(calling, "invoice", "")))
    inner = EffectTool(tool.name, tool.args, business).on(killing)

    def run(call: ToolCall) -> Any:
        calling.invoice = invoice = str(call.arguments.get("invoice_id", ""))
        if not call.reconcile:
            die_at("before-claim", invoice)  # nothing begun
        out = inner(call)
        if not call.reconcile:
            die_at("before-result", invoice)  # committed; Temporal does not know it yet
        return out

    run.__name__ = run.__qualname__ = tool.name  # its activity's name, as Tower's tools
    setattr(run, MARK, True)  # still the tower.effects tool: it answers reconcile itself
    return activity.defn(run)


def shorten() -> None:
    # The one tool object the workflows and the worker share (a test harness's liberty).
    object.__setattr__(billing.issue_refund, "timeout_seconds", TOOL_TIMEOUT_SECONDS)
    object.__setattr__(billing.issue_refund, "attempts", TOOL_ATTEMPTS)
    pg, made = os.environ.get("JEPSEN_PG", ""), tower_worker.activity_for
    store = Postgres(pg, schema=PG_SCHEMA) if pg else None

    def activity_for(tool: Tool, bound: Any = tower_worker.UNBOUND) -> Callable[..., Any]:
        if tool.name != "issue_refund":
            return made(tool, bound)
        return refund_activity(tool, store or bound)

    tower_worker.activity_for = activity_for


def forks() -> None:
    """A worker forked per line read on stdin (its log's path), its pid written back: one
    Python start-up and import for every worker a run starts and restarts (each fresh one
    costs a second of CPU; the kills restart workers dozens of times). Nothing runs here but
    the imports (no thread, no event loop): each child is a whole worker process of its own."""
    signal.signal(signal.SIGCHLD, reap)
    for line in sys.stdin:
        pid = os.fork()
        if pid == 0:
            serve(line.strip())
        print(pid, flush=True)


def reap(signum: int, frame: object) -> None:
    """The workers that died, waited for as they die (so their CPU time counts as this
    process's children's, as a fresh worker's counts as the test's)."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def serve(log: str) -> NoReturn:
    """The forked child: its own session, its output to ``log``, the worker until stopped."""
    code = 0
    try:
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        out = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        import worker

        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(worker.main([]))
    except SystemExit as exc:  # as a fresh process would end on it
        code = exc.code if isinstance(exc.code, int) else 1
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    shorten()
    import worker  # after shorten(): the worker registers the tools as they are now

    if sys.argv[1:] == ["--forks"]:
        forks()
    else:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(worker.main())

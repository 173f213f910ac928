"""An attempt that failed on a store, or that the server already timed out, ends in one
line, not a traceback.

A store that is unreachable (``StoreUnavailable``) or lacks an entry another host wrote
(``StoreEntryMissing``) fails the attempt, never the run (tower/activities/stores.py): the
call is asked again until the store answers. Left alone, each such attempt logs a full
traceback at WARNING (every frame from the store's driver up), a flood while a store is
down for a minute, and its failure carries that traceback into the history, where the
payload store that is down may be needed to hold it. ``TowerPlugin`` installs this
interceptor on every worker, outermost: such an attempt logs one warning naming the
activity, the attempt and the store's own words, and fails as a benign error of the same
type and message, with no chained cause and a traceback of a few frames.

An attempt whose heartbeat came late (a loaded host, a long pause) is timed out by the
server, which schedules the next one; the worker then cancels the late attempt, which would
end as an unexplained ``CancelledError`` traceback though nothing is wrong with the run.
Here it logs one warning and completes as a benign failure (the server ignores it anyway).
A cancellation for any other reason (the run asked, a shutdown, a reset) is left as it was.

A workflow task whose payloads the payload store could not write or read fails too (the
server asks again), and so does an attempt whose result it could not write (the SDK encodes
the result after the activity returned: the workflow asks again, tower/temporal/_store_wait.py);
``quiet_store_tracebacks`` makes the SDK's log of either one line with the store's words, not
a traceback through the SDK's payload visitor.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.exceptions import CancelledError as TemporalCancelled
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from tower.contract.failures import Code, TowerError, failure, rebuilt
from tower.temporal.payloads import PayloadMissing, PayloadStoreUnavailable

# The SDK's worker loggers: one of them (a module's own) logs a workflow task it could not
# encode or decode. Each gets the filter, so no private module is named here. The activity
# logger logs an attempt whose result could not be encoded.
SDK_WORKER_LOGGERS = "temporalio.worker"
SDK_ACTIVITY_LOGGER = "temporalio.activity"


class AttemptsEndQuietly(Interceptor):
    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Inbound(next)


class _Inbound(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        try:
            return await super().execute_activity(input)
        except ApplicationError as exc:
            found = rebuilt(exc)
            if found is None or found.code not in (Code.STORE_ENTRY_MISSING,
                                                   Code.STORE_UNAVAILABLE):
                raise
            info = activity.info()
            activity.logger.warning("attempt %d of activity %r failed: %s; asked again until "
                                    "the store serves it", info.attempt, info.activity_type,
                                    exc.message)
            raise failure(found, benign=True) from None
        except (asyncio.CancelledError, TemporalCancelled):
            details = activity.cancellation_details()
            # (The server answers a late heartbeat with "not found": that attempt is over.)
            if details is None or not (details.timed_out or details.not_found):
                raise
            info = activity.info()
            reason = (f"attempt {info.attempt} of activity {info.activity_type!r} "
                      f"(run {info.workflow_run_id}) was timed out by the server (a heartbeat "
                      "or its deadline came late) and stopped; Temporal runs the next attempt")
            activity.logger.warning(reason)
            raise failure(TowerError(reason, code=Code.ATTEMPT_TIMED_OUT), benign=True) from None


def quiet_store_tracebacks() -> None:
    """Log a workflow task or an attempt failed by the payload store in one line (once per
    process; the SDK's worker modules are loaded by then: a worker is being configured)."""
    import temporalio.worker  # noqa: F401  (its modules' loggers exist once it is imported)

    names = [n for n in logging.root.manager.loggerDict
             if n == SDK_WORKER_LOGGERS or n.startswith(SDK_WORKER_LOGGERS + ".")]
    names.append(SDK_ACTIVITY_LOGGER)
    for name in names:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _StoreTracebacks) for f in logger.filters):
            logger.addFilter(_StoreTracebacks())


class _StoreTracebacks(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        failure = _store_failure(record.exc_info[1] if record.exc_info else None)
        if failure is not None:
            record.msg, record.args = "%s: %s; asked again until the store serves it", (
                record.getMessage(), failure)
            record.exc_info, record.exc_text = None, None
        return True


def _store_failure(exc: BaseException | None) -> BaseException | None:
    while exc is not None:
        if isinstance(exc, PayloadStoreUnavailable | PayloadMissing):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None

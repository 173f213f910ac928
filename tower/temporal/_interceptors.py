"""The interceptors ``TowerPlugin`` installs on every worker: ``AttemptsEndQuietly``,
``ScheduledByOwnAgents`` and ``TraceHeaderGuard``."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Collection
from typing import Any

import temporalio.client
import temporalio.worker
from temporalio import activity
from temporalio.client import Client
from temporalio.converter import PayloadConverter
from temporalio.exceptions import ApplicationError
from temporalio.exceptions import CancelledError as TemporalCancelled
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from tower.contract.failures import Code, TowerError, failure, rebuilt
from tower.temporal._machine_run import run_origin
from tower.temporal.payloads import PayloadMissing, PayloadStoreUnavailable

# The SDK's worker loggers (each gets the filter, so no private module is named here) log a
# workflow task the payload store failed; the activity logger, a result it could not store.
SDK_WORKER_LOGGERS = "temporalio.worker"
SDK_ACTIVITY_LOGGER = "temporalio.activity"
_REMEMBERED = 4096  # runs whose scheduler verdict is kept (oldest dropped first)
TRACE_HEADER = "_tracer-data"  # the header temporalio.contrib.opentelemetry reads


class AttemptsEndQuietly(Interceptor):
    """A store that is unreachable or lacks an entry another host wrote fails the attempt,
    never the run (tower/activities/stores.py). Left alone, each attempt logs a traceback
    from the store's driver up and carries it into the history, where the payload store
    that is down may be needed to hold it: here it fails as a benign error of the same type
    and message, without the chain. A late attempt the server timed out already is
    cancelled by the worker: one warning, and a benign failure the server ignores."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _QuietAttempt(next)


class _QuietAttempt(ActivityInboundInterceptor):
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
    """Log a workflow task or an attempt the payload store failed in one line (the SDK's
    worker modules, imported above, have made their loggers)."""
    names = [n for n in logging.root.manager.loggerDict
             if n == SDK_WORKER_LOGGERS or n.startswith(SDK_WORKER_LOGGERS + ".")]
    for name in [*names, SDK_ACTIVITY_LOGGER]:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _StoreTracebacks) for f in logger.filters):
            logger.addFilter(_StoreTracebacks())


class _StoreTracebacks(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        while exc is not None and not isinstance(exc, PayloadStoreUnavailable | PayloadMissing):
            exc = exc.__cause__ or exc.__context__
        if exc is not None:
            record.msg, record.args = "%s: %s; asked again until the store serves it", (
                record.getMessage(), exc)
            record.exc_info, record.exc_text = None, None
        return True


class ScheduledByOwnAgents(Interceptor):
    """Refuses an activity scheduled by a run that is not one of ``hosted`` (workflow type
    names; empty: any) on this worker's task queue; ``client`` (the worker's) describes it.

    On a server without authorization anyone can run a worker whose workflow schedules any
    activity on the deployment's queue (a tool that pays, with an ``Authority`` of their
    choosing), and a tool cannot tell who scheduled it. So before any activity runs, the
    scheduling run must be of a type this worker hosts, and the server must say it runs on
    this worker's queue, else it fails, not retryable, and nothing of it runs. A worker
    polling this very queue with a workflow named like an agent is, to such a server, this
    deployment's worker: Tower's server build lets only its services poll (docs/approvals.md).
    """

    def __init__(self, client: Client, hosted: Collection[str]) -> None:
        self.client = client
        self.hosted = frozenset(hosted)
        self.verdicts: dict[str, str] = {}  # run id -> "" (ours) or why not

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Guarded(next, self)

    async def refusal(self) -> str:
        """Why the run that scheduled the current activity may not ("" when it may)."""
        info = activity.info()
        if self.hosted and info.workflow_type not in self.hosted:
            return (f"activity {info.activity_type!r} was scheduled by workflow "
                    f"{info.workflow_type!r}, which this worker does not host")
        run_id = info.workflow_run_id or ""
        if run_id not in self.verdicts:  # one description per run, not per activity
            # The worker's client: activity.client() exists only in async activities.
            was = await run_origin(self.client, info.workflow_id or "", run_id)
            self.verdicts[run_id] = "" if was == (info.workflow_type, info.task_queue) else (
                f"activity {info.activity_type!r} was scheduled by run {run_id} of workflow "
                f"{was[0]!r} on task queue {was[1]!r}; this worker runs activities only for "
                f"its own runs on task queue {info.task_queue!r}")
            while len(self.verdicts) > _REMEMBERED:
                del self.verdicts[next(iter(self.verdicts))]
        return self.verdicts[run_id]


class _Guarded(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, guard: ScheduledByOwnAgents) -> None:
        super().__init__(next)
        self.guard = guard

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        refused = await self.guard.refusal()
        if refused:
            raise failure(TowerError(f"refused: {refused}", code=Code.ACTIVITY_REFUSED))
        return await super().execute_activity(input)


def readable(input: Any) -> Any:
    """``input`` without a trace header the tracer could not read (what it reads: a JSON
    object of strings)."""
    header = input.headers.get(TRACE_HEADER)
    if header is None:
        return input
    try:
        carrier = PayloadConverter.default.from_payloads([header])[0]
    except Exception:  # whatever the converter raises on bytes a sender chose
        carrier = None
    if isinstance(carrier, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in carrier.items()):
        return input
    return dataclasses.replace(
        input, headers={k: v for k, v in input.headers.items() if k != TRACE_HEADER})


class TraceHeaderGuard(temporalio.client.Interceptor, temporalio.worker.Interceptor):
    """Whoever signals, queries, updates or starts a run writes its headers. The tracer
    reads the trace context inside workflow code: one it cannot read raises there, and as
    the signal stays in the history, every later task of the run fails. This guard, in
    front of the tracer, drops such a header: that one message loses its trace link. A
    client interceptor too (a pass-through), so that a plugin keeps it ahead of the
    tracer's: the worker takes a client's interceptors first, in order."""

    def workflow_interceptor_class(
        self, input: temporalio.worker.WorkflowInterceptorClassInput
    ) -> type[temporalio.worker.WorkflowInboundInterceptor]:
        return _ReadableHeaders


class _ReadableHeaders(temporalio.worker.WorkflowInboundInterceptor):
    async def execute_workflow(self, input: temporalio.worker.ExecuteWorkflowInput) -> Any:
        return await super().execute_workflow(readable(input))

    async def handle_signal(self, input: temporalio.worker.HandleSignalInput) -> None:
        await super().handle_signal(readable(input))

    async def handle_query(self, input: temporalio.worker.HandleQueryInput) -> Any:
        return await super().handle_query(readable(input))

    def handle_update_validator(self, input: temporalio.worker.HandleUpdateInput) -> None:
        super().handle_update_validator(readable(input))

    async def handle_update_handler(self, input: temporalio.worker.HandleUpdateInput) -> Any:
        return await super().handle_update_handler(readable(input))

"""A trace header the tracer cannot read is dropped, not a stalled run.

Whoever signals, queries, updates or starts a run also writes its headers. The tracing
interceptor (OpenTelemetryPlugin) reads the trace context from the ``_tracer-data`` header
with the default payload converter, inside workflow code: one that is not JSON, or not a
string map, raises there, and as the signal stays in the history, every workflow task of the
run fails from then on. This interceptor sits in front of the tracer (``TowerPlugin``
installs both, in that order) and removes such a header, so that one message loses its trace
link and nothing else changes.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, TypeVar

import temporalio.client
import temporalio.worker
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadConverter

TRACE_HEADER = "_tracer-data"  # the header temporalio.contrib.opentelemetry reads


class _HasHeaders(Protocol):
    headers: Any


In = TypeVar("In", bound=_HasHeaders)


def is_trace_context(payload: Payload) -> bool:
    """Whether ``payload`` is what the tracer reads: a JSON object of strings."""
    try:
        carrier = PayloadConverter.default.from_payloads([payload])[0]
    except Exception:  # whatever the converter raises on bytes a sender chose
        return False
    return isinstance(carrier, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in carrier.items())


def readable(input: In) -> In:
    """``input`` without a trace header the tracer could not read."""
    header = input.headers.get(TRACE_HEADER)
    if header is None or is_trace_context(header):
        return input
    return dataclasses.replace(  # type: ignore[type-var]
        input, headers={k: v for k, v in input.headers.items() if k != TRACE_HEADER})


class TraceHeaderGuard(temporalio.client.Interceptor, temporalio.worker.Interceptor):
    """A client interceptor too (a pass-through), so that a plugin keeps it on the client
    ahead of the tracer's: the worker takes a client's interceptors first, in order."""

    def workflow_interceptor_class(
        self, input: temporalio.worker.WorkflowInterceptorClassInput
    ) -> type[temporalio.worker.WorkflowInboundInterceptor]:
        return _Inbound


class _Inbound(temporalio.worker.WorkflowInboundInterceptor):
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

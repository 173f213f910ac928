"""OpenTelemetry on the real dev server: one trace from the client through the
workflow's states to the activities, and no duplicate span when a worker replays."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import WorkerFactory
from gatekit import decision, new_id, refund_request, refunds, task_failures, wait_pending
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.api.common.v1 import Header, Payload, Payloads, WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import SignalWorkflowExecutionRequest
from temporalio.client import Client
from temporalio.contrib.opentelemetry import ReplaySafeTracerProvider
from temporalio.worker import Replayer, Worker

from tower.activities.model import ModelSettings
from tower.temporal import TowerPlugin
from tower.temporal.telemetry import (
    TracingConfigError,
    configure_tracing,
    exporter_names,
    make_exporter,
)
from workflows.account import AccountAgent, AccountRequest
from workflows.refund import RefundAgent
from workflows.registry import AGENTS

SCRIPTED = ModelSettings()


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    provider = configure_tracing(env={}, exporters=[memory])
    assert isinstance(provider, ReplaySafeTracerProvider)
    if memory not in _exporters(provider):  # another module installed the provider first
        provider.add_span_processor(SimpleSpanProcessor(memory))
    yield memory


def _exporters(provider: ReplaySafeTracerProvider) -> list[object]:
    inner = provider._tracer_provider._active_span_processor._span_processors  # noqa: SLF001
    return [getattr(p, "span_exporter", None) for p in inner]


@pytest.fixture
async def traced(client: Client, exporter: InMemorySpanExporter) -> Client:
    plugin = TowerPlugin()
    assert plugin.traced, "tracing is configured, so the plugin traces"
    return Client(client.service_client, namespace=client.namespace, plugins=[plugin])


def spans_of(exporter: InMemorySpanExporter, run_id: str) -> list[ReadableSpan]:
    trace.get_tracer_provider().force_flush()  # type: ignore[attr-defined]
    ours = [s for s in exporter.get_finished_spans()
            if (s.attributes or {}).get("temporalWorkflowID") == run_id]
    traces = {s.context.trace_id for s in ours}
    return [s for s in exporter.get_finished_spans() if s.context.trace_id in traces]


def states(spans: list[ReadableSpan]) -> list[tuple[object, ...]]:
    found = [s for s in spans if s.name.startswith("state ")]
    return sorted((a["tower.step"], a["tower.from"], a["tower.to"])
                  for a in (s.attributes or {} for s in found))


async def test_one_trace_client_to_states_to_activities_with_replays(
    traced: Client, exporter: InMemorySpanExporter, task_queue: str, scripted_worker: WorkerFactory
) -> None:
    run_id = f"traced-{uuid.uuid4().hex[:8]}"
    # No workflow cache: every workflow task replays the run from its first event.
    async with scripted_worker(traced, models=SCRIPTED, max_cached_workflows=0):
        handle = await traced.start_workflow(
            AccountAgent.run, AccountRequest(question="Check my account ACC-1001"),
            id=run_id, task_queue=task_queue)
        await handle.result()
        await handle.query("state", result_type=dict)  # query spans are left out
    spans = spans_of(exporter, run_id)
    assert len({s.context.trace_id for s in spans}) == 1, "one trace for the whole run"
    assert len({s.context.span_id for s in spans}) == len(spans), "no span twice"
    by_id = {s.context.span_id: s for s in spans}
    names = sorted(s.name for s in spans)
    assert names.count("StartWorkflow:account") == 1 and names.count("RunWorkflow:account") == 1
    assert not [n for n in names if "Query" in n]
    assert states(spans) == [(1, "reason", "lookup_account"), (2, "lookup_account", "reason"),
                             (3, "reason", "DONE")]
    reason = next(s for s in spans if s.name == "state reason"
                  and s.attributes["tower.step"] == 1)  # type: ignore[index]
    attrs = reason.attributes or {}
    assert attrs["tower.agent"] == "account" and attrs["tower.models"] == ("scripted",)
    tokens, prompt, completion = (
        attrs[f"tower.{k}"] for k in ("tokens", "prompt_tokens", "completion_tokens"))
    assert isinstance(tokens, int) and isinstance(prompt, int) and isinstance(completion, int)
    assert tokens > 0 and tokens == prompt + completion
    # Each activity runs inside the state that called it.
    for run in (s for s in spans if s.name.startswith("RunActivity:")):
        chain, parent = [], run.parent
        while parent is not None and parent.span_id in by_id:
            chain.append(by_id[parent.span_id].name)
            parent = by_id[parent.span_id].parent
        assert any(n.startswith("state ") for n in chain), (run.name, chain)
        assert chain[-1] == "StartWorkflow:account"
    model_span = next(s for s in spans if s.name == "RunActivity:call_model")
    assert (model_span.attributes or {})["gen_ai.response.model"] == "scripted"


async def test_worker_restart_and_replayer_emit_no_duplicate_spans(
    traced: Client, exporter: InMemorySpanExporter, task_queue: str, scripted_worker: WorkerFactory
) -> None:
    run_id = f"restart-{uuid.uuid4().hex[:8]}"
    # Worker A runs the workflow but no activity: the run stops at its first model call.
    only_workflows = Worker(traced, task_queue=task_queue, workflows=list(AGENTS.values()),
                            plugins=[TowerPlugin(own_activities=False, tools=False)])
    async with only_workflows:
        handle = await traced.start_workflow(
            AccountAgent.run, AccountRequest(question="Check my account ACC-1001"),
            id=run_id, task_queue=task_queue)
        await _until_scheduled(handle)
    assert states(spans_of(exporter, run_id)) == [], "the first state is still open"
    # Worker B has an empty cache: it replays A's part of the history, then goes on.
    async with scripted_worker(traced):
        await handle.result()
    spans = spans_of(exporter, run_id)
    assert states(spans) == [(1, "reason", "lookup_account"), (2, "lookup_account", "reason"),
                             (3, "reason", "DONE")]
    assert len({s.context.span_id for s in spans}) == len(spans)
    assert [s.name for s in spans].count("RunWorkflow:account") == 1
    before = len(exporter.get_finished_spans())
    replayer = Replayer(workflows=list(AGENTS.values()), plugins=[TowerPlugin()])
    await replayer.replay_workflow(await handle.fetch_history())
    trace.get_tracer_provider().force_flush()  # type: ignore[attr-defined]
    assert len(exporter.get_finished_spans()) == before, "a replay exports nothing"


async def _until_scheduled(handle: object) -> None:
    for _ in range(100):
        history = await handle.fetch_history()  # type: ignore[attr-defined]
        if any(e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
               for e in history.events):
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the model call was never scheduled")


def test_exporter_chosen_by_the_standard_variables() -> None:
    assert exporter_names({}) == []
    assert exporter_names({"TOWER_TRACING": "1"}) == ["console"]
    assert exporter_names({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}) == ["otlp"]
    assert exporter_names({"OTEL_TRACES_EXPORTER": "console,otlp"}) == ["console", "otlp"]
    assert exporter_names({"OTEL_TRACES_EXPORTER": "none", "TOWER_TRACING": "1"}) == []
    assert exporter_names({"OTEL_SDK_DISABLED": "true", "TOWER_TRACING": "1"}) == []
    with pytest.raises(TracingConfigError, match="'zipkin' is not supported"):
        make_exporter("zipkin", {})
    with pytest.raises(TracingConfigError, match="protocol 'http/json' is not supported"):
        make_exporter("otlp", {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})


def test_otlp_exporter_posts_spans_to_the_endpoint() -> None:
    received: list[bytes] = []

    class Collector(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            received.append(self.path.encode() + b"|" + self.rfile.read(
                int(self.headers["Content-Length"])))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        otlp = make_exporter("otlp", {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint})
        provider = TracerProvider()  # a private provider: the global one stays as it is
        provider.add_span_processor(SimpleSpanProcessor(otlp))
        with provider.get_tracer("t").start_as_current_span("state reason",
                                                            attributes={"tower.step": 1}):
            pass
        provider.shutdown()
    finally:
        server.shutdown()
    path, _, body = received[0].partition(b"|")
    assert path == b"/v1/traces"
    request = ExportTraceServiceRequest.FromString(body)
    span = request.resource_spans[0].scope_spans[0].spans[0]
    assert span.name == "state reason" and span.attributes[0].value.int_value == 1


async def test_a_trace_header_the_worker_cannot_read_is_ignored_not_a_stalled_run(
    traced: Client, task_queue: str, scripted_worker: WorkerFactory, db_path: Path,
) -> None:
    """Whoever signals a run writes the signal's headers too. The tracing interceptor reads
    the trace context from one of them: a header that is not a trace context (not JSON, or
    'encrypted') must cost that signal its trace link, not fail every workflow task of the
    run. The signals are refused as decisions; the refund is then approved and paid once."""
    run = new_id("refund")
    async with scripted_worker(traced):
        handle = await traced.start_workflow(RefundAgent.run, refund_request(traced, run),
                                             id=run, task_queue=task_queue)
        pending = (await wait_pending(handle))["pending"]
        bad_headers = [Payload(metadata={"encoding": b"json/plain"}, data=b"{not json"),
                       Payload(metadata={"encoding": b"binary/encrypted"}, data=b"\0" * 40),
                       Payload(metadata={"encoding": b"json/plain"}, data=b"[1, 2]")]
        for header in bad_headers:
            await traced.workflow_service.signal_workflow_execution(
                SignalWorkflowExecutionRequest(
                    namespace=traced.namespace, signal_name="decision", identity="mallory",
                    workflow_execution=WorkflowExecution(workflow_id=run),
                    input=Payloads(payloads=[Payload(metadata={"encoding": b"json/plain"},
                                                     data=b"{}")]),
                    header=Header(fields={"_tracer-data": header})))
        async with asyncio.timeout(30):
            while (await handle.query("approvals", result_type=dict))["refused_total"] < 3:
                await asyncio.sleep(0.2)
        assert task_failures(await handle.fetch_history()) == []
        out = await handle.execute_update("decide", decision(traced, run, pending),
                                          result_type=dict)
        await handle.result()
    assert out["result"] == "approved"
    assert refunds(db_path) == [("INV-2004", 120000)]

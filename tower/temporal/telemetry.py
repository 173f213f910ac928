"""Tracing setup from the standard OTEL_* variables, for the worker and the CLI.

Off unless asked for: OTEL_TRACES_EXPORTER=console|otlp|none (a comma list); unset, it is
``otlp`` when an OTLP endpoint is set, ``console`` with TOWER_TRACING=1. OTLP speaks
http/protobuf (the collector's port 4318). OTEL_SDK_DISABLED=true turns it all off;
OTEL_SERVICE_NAME names the service.

The provider is Temporal's replay-safe one (span ids from the workflow's seeded randomness,
nothing exported while replaying), so a run traced across a worker restart has each span
once; a ``TowerPlugin`` made after it traces.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tower.contract.failures import Code, TowerError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.sdk.trace.sampling import Sampler, SamplingResult
    from temporalio.contrib.opentelemetry import ReplaySafeTracerProvider

TRUE = ("1", "true", "yes", "on")
# `tower run` polls its run with queries several times a second: tracing each poll
# would bury the run's own spans.
NOISE = ("QueryWorkflow:", "HandleQuery:")


class TracingConfigError(TowerError, ValueError):  # a ValueError: a setting's bad value
    """The OTEL_* settings ask for something this install cannot do."""

    CODE = Code.BAD_SETTINGS


def exporter_names(env: Mapping[str, str]) -> list[str]:
    """Which exporters the environment asks for; empty means tracing is off."""
    if env.get("OTEL_SDK_DISABLED", "").lower() in TRUE:
        return []
    named = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",")
             if n.strip()]
    if named:
        return [n for n in named if n != "none"]
    if _traces_url(env):
        return ["otlp"]
    return ["console"] if env.get("TOWER_TRACING", "").lower() in TRUE + ("console",) else []


def make_exporter(name: str, env: Mapping[str, str]) -> SpanExporter:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        # stderr: a command's stdout carries its output (`--json` data) and nothing else.
        return ConsoleSpanExporter(out=sys.stderr)
    if name != "otlp":
        raise TracingConfigError(
            f"OTEL_TRACES_EXPORTER={name!r} is not supported (use console, otlp or none)")
    protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
    if protocol != "http/protobuf":
        raise TracingConfigError(f"OTLP protocol {protocol!r} is not supported (use "
                                 "http/protobuf, the collector's port 4318)")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=_traces_url(env))


def configure_tracing(
    env: Mapping[str, str] | None = None, exporters: list[SpanExporter] | None = None,
) -> ReplaySafeTracerProvider | None:
    """Install the process-wide tracer provider once; None when tracing is off.
    ``exporters`` replaces what the environment asks for (tests pass an in-memory one)."""
    env = os.environ if env is None else env
    if exporters is None and not exporter_names(env) and not _provider_loaded():
        return None  # off: the OpenTelemetry SDK is not even imported
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from temporalio.contrib.opentelemetry import create_tracer_provider

    if (current := replay_safe()) is not None:
        return current  # OpenTelemetry allows one global provider per process
    if exporters is None:
        exporters = [make_exporter(n, env) for n in exporter_names(env)]
    if not exporters:
        return None
    attributes = {} if env.get("OTEL_SERVICE_NAME") else {"service.name": "tower"}
    provider = create_tracer_provider(sampler=_quiet(), resource=Resource.create(attributes))
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return provider


def replay_safe() -> ReplaySafeTracerProvider | None:
    """The process's tracer provider if it is Temporal's replay-safe one (made here)."""
    if not _provider_loaded():
        return None
    from opentelemetry import trace
    from temporalio.contrib.opentelemetry import ReplaySafeTracerProvider

    provider = trace.get_tracer_provider()
    return provider if isinstance(provider, ReplaySafeTracerProvider) else None


def _provider_loaded() -> bool:
    """Whether a replay-safe provider can have been made in this process (its module is
    loaded): with none, and no traces asked for, the SDK is left unimported (~25 ms)."""
    return "temporalio.contrib.opentelemetry" in sys.modules


@functools.cache
def _quiet() -> Sampler:
    """The sampler of Tower's provider: every span but the query polling ones (made when
    first used: the SDK loads then)."""
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON, Decision, ParentBased, SamplingResult
    from opentelemetry.sdk.trace.sampling import Sampler as Base

    class Quiet(Base):
        def should_sample(self, parent_context: Any, trace_id: int, name: str,
                          *args: Any, **kwargs: Any) -> SamplingResult:
            if name.startswith(NOISE):
                return SamplingResult(Decision.DROP)
            return ParentBased(ALWAYS_ON).should_sample(parent_context, trace_id, name,
                                                        *args, **kwargs)

        def get_description(self) -> str:
            return "tower: all but query polling"

    return Quiet()


def _traces_url(env: Mapping[str, str]) -> str | None:
    # The per-signal variable is used as is; the general one gets the signal's path.
    if env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    return f"{base.rstrip('/')}/v1/traces" if base else None

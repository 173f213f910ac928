"""Moved to ``tower.temporal.telemetry`` (the worker and every client use it); kept so
that code importing it from here goes on working."""

from tower.temporal.telemetry import (
    SkipNoise,
    TracingConfigError,
    configure_tracing,
    exporter_names,
    flush_traces,
    make_exporter,
)

__all__ = ["SkipNoise", "TracingConfigError", "configure_tracing",
           "exporter_names", "flush_traces", "make_exporter"]

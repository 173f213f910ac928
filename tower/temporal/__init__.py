"""The Temporal layer: the runtime loop, the node context, gates, fan-out, tracing."""

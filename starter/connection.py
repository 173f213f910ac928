"""Connect to Temporal the way every Temporal tool does: ``temporalio.envconfig``.

TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_PROFILE and the config file all
work; a server that does not answer gets a message saying how to start one.
"""

from __future__ import annotations

from typing import Any

from temporalio.client import Client
from temporalio.envconfig import ClientConfigProfile

from activities.payloads import tower_data_converter
from starter.telemetry import client_plugins, configure_tracing

DEFAULT_ADDRESS = "localhost:7233"
TASK_QUEUE = "tower"


class ServerUnreachable(RuntimeError):
    pass


def connect_config(address: str | None = None, namespace: str | None = None) -> dict[str, Any]:
    config: dict[str, Any] = dict(ClientConfigProfile.load().to_client_connect_config())
    config.setdefault("target_host", DEFAULT_ADDRESS)
    if address:
        config["target_host"] = address
    if namespace:
        config["namespace"] = namespace
    return config


async def connect(address: str | None = None, namespace: str | None = None) -> Client:
    config = connect_config(address, namespace)
    configure_tracing()  # a no-op unless the OTEL_* variables ask for traces
    try:
        # pydantic payloads; large ones go to external storage (activities/payloads.py).
        return await Client.connect(**config, data_converter=tower_data_converter(),
                                    plugins=client_plugins())
    except RuntimeError as exc:
        raise ServerUnreachable(
            f"no Temporal server answers at {config['target_host']} ({exc}).\n"
            "Start one with `tower dev` (or set TEMPORAL_ADDRESS to a running server)."
        ) from exc

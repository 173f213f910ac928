"""Connect to Temporal the way every Temporal tool does (``temporalio.envconfig``:
TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_PROFILE, the config file). A tenant is a
namespace: ``--tenant NAME`` confines every command to it, and the server enforces it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.envconfig import ClientConfigProfile
from temporalio.service import RPCError, RPCStatusCode

from tower.client.errors import ClientError
from tower.contract.failures import Code
from tower.temporal.plugin import TowerPlugin
from tower.temporal.telemetry import configure_tracing

DEFAULT_ADDRESS = "localhost:7233"
TASK_QUEUE = "tower"


TENANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_tenant: str | None = None  # set once by `tower --tenant` / `worker.py --tenant`


class ServerUnreachable(ClientError, RuntimeError):  # a RuntimeError: as the SDK's connect
    """No Temporal server answers at the configured address."""

    CODE = Code.SERVER_UNREACHABLE


class UnknownTenant(ClientError, RuntimeError):  # a RuntimeError: as ServerUnreachable
    """The tenant's namespace does not exist on the server."""

    CODE = Code.UNKNOWN_TENANT


def check_tenant(name: str) -> str:
    if not TENANT_NAME.fullmatch(name):
        raise ValueError(f"invalid tenant name {name!r}: use letters, digits, '.', '_' or '-' "
                         "(at most 63, starting with a letter or digit)")
    return name


def use_tenant(name: str | None) -> None:
    """Act within tenant ``name`` (a namespace) from now on; None keeps the default."""
    global _tenant
    _tenant = check_tenant(name) if name else None


def connect_config(address: str | None = None, namespace: str | None = None) -> dict[str, Any]:
    config: dict[str, Any] = dict(ClientConfigProfile.load().to_client_connect_config())
    config.setdefault("target_host", DEFAULT_ADDRESS)
    if address:
        config["target_host"] = address
    if namespace or _tenant:
        config["namespace"] = namespace or _tenant
    if token_file := os.environ.get("TOWER_TEMPORAL_TOKEN_FILE"):
        # The server's authorizer checks this JWT (docs/production.md, "Server authorization").
        try:
            token = Path(token_file).read_text().strip()
        except OSError as exc:
            raise ValueError(f"TOWER_TEMPORAL_TOKEN_FILE={token_file}: {exc.strerror}") from None
        config["rpc_metadata"] = {**config.get("rpc_metadata", {}),
                                  "authorization": f"Bearer {token}"}
    return config


async def connect(address: str | None = None, namespace: str | None = None, *,
                  check_namespace: bool = True) -> Client:
    """A client for the configured server; ``check_namespace=False`` for `tower setup`."""
    config = connect_config(address, namespace)
    configure_tracing()  # a no-op unless the OTEL_* variables ask for traces
    try:
        # pydantic payloads; large ones go to external storage (tower/temporal/payloads.py);
        # encrypted when TOWER_CODEC_KEYS is set (tower/temporal/codec.py).
        client = await Client.connect(**config, plugins=[TowerPlugin()])
    except RuntimeError as exc:
        raise ServerUnreachable(
            f"no Temporal server answers at {config['target_host']} ({exc}).\n"
            "Start one with `tower dev` (or set TEMPORAL_ADDRESS to a running server)."
        ) from exc
    if check_namespace:
        await _require_namespace(client)
    return client


async def _require_namespace(client: Client) -> None:
    # Otherwise a mistyped tenant shows up later as "workflow not found" or a hung start.
    try:
        await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=client.namespace))
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise UnknownTenant(
                f"tenant (namespace) {client.namespace!r} does not exist on this server; "
                f"`tower setup --tenant {client.namespace}` creates it (on a dev server: "
                f"`tower dev --tenant {client.namespace}`)"
            ) from None
        raise

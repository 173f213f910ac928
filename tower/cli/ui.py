"""The Web UI's real address, for the links commands print: TOWER_UI_URL; else the UI the
server itself says it has (`tower dev` and the demo's server record it in each namespace's
data, so a command finds it from any folder); else the server's host on port 8233."""

from __future__ import annotations

import os
from urllib.parse import quote

from temporalio.api.namespace.v1 import UpdateNamespaceInfo
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest, UpdateNamespaceRequest
from temporalio.client import Client
from temporalio.service import RPCError

DEFAULT_UI_PORT = 8233
UI_DATA = "tower.web_ui"  # the namespace data key: the UI's URL, or NO_UI
NO_UI = "none"


async def record_ui(client: Client, namespaces: list[str], ui: str | None) -> None:
    """Keep the dev server's UI (None: headless) in each of ``namespaces``' data."""
    for namespace in dict.fromkeys(namespaces):
        await client.workflow_service.update_namespace(UpdateNamespaceRequest(
            namespace=namespace, update_info=UpdateNamespaceInfo(data={UI_DATA: ui or NO_UI})))


async def ui_base(client: Client) -> str | None:
    """The UI's base URL for ``client``'s server and namespace; None when it has none."""
    explicit = os.environ.get("TOWER_UI_URL", "").strip()
    if explicit:
        return explicit.rstrip("/")
    try:
        described = await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=client.namespace))
    except RPCError:  # not allowed to describe it: the usual port
        pass
    else:
        recorded = described.namespace_info.data.get(UI_DATA)
        if recorded:
            return None if recorded == NO_UI else recorded
    return default_ui(client.service_client.config.target_host)


def default_ui(address: str) -> str:
    host = address.rsplit(":", 1)[0] or "localhost"
    if host in ("127.0.0.1", "0.0.0.0", "[::1]"):
        host = "localhost"
    return f"http://{host}:{DEFAULT_UI_PORT}"


def run_link(base: str | None, namespace: str, workflow_id: str) -> str | None:
    """The run's page (its id percent-encoded: a link, whatever the id holds)."""
    if not base:
        return None
    return (f"{base.rstrip('/')}/namespaces/{quote(namespace, safe='')}/workflows/"
            f"{quote(workflow_id, safe='')}")

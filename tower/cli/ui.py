"""The Web UI's real address, for the links commands print.

First match wins: TOWER_UI_URL; the UI the server itself says it has (`tower dev` and the
demo's embedded server record their UI, or that they have none, in the data of each
namespace they set up: a command finds it from any folder, whatever TOWER_CONFIG_DIR
holds, and nothing is written outside the project); else the server's host on port 8233,
the dev server's default.
"""

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
    """What the dev server at ``client``'s address serves: its UI's URL, or None
    (headless), kept in each of ``namespaces`` (in the server's own state)."""
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
    """The UI a dev server at ``address`` has by default."""
    host = address.rsplit(":", 1)[0] or "localhost"
    if host in ("127.0.0.1", "0.0.0.0", "[::1]"):
        host = "localhost"
    return f"http://{host}:{DEFAULT_UI_PORT}"


def run_link(base: str | None, namespace: str, workflow_id: str) -> str | None:
    """The run's page (its id percent-encoded: a link, whatever the id holds)."""
    if not base:
        return None
    return f"{base}/namespaces/{quote(namespace, safe='')}/workflows/{quote(workflow_id, safe='')}"

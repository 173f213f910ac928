"""The Web UI's real address, for the links commands print.

First match wins: TOWER_UI_URL; the UI of the dev server `tower dev` started for this
address (it records its UI, or that it has none, in .tower/dev-ui.json and in the user's
config dir, so a command run from another folder finds it too); else the server's host on
port 8233, the dev server's default.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

RECORD = Path(".tower") / "dev-ui.json"
DEFAULT_UI_PORT = 8233


def _records(record: Path | None) -> list[Path]:
    if record is not None:
        return [record]
    from tower.client.keys import config_dir

    return [RECORD, config_dir() / "dev-ui.json"]  # this project's, then the user's


def ui_base(address: str, record: Path | None = None) -> str | None:
    """The UI's base URL for the server at ``address``; None when it has no UI."""
    explicit = os.environ.get("TOWER_UI_URL", "").strip()
    if explicit:
        return explicit.rstrip("/")
    for path in _records(record):
        known = _recorded(path)
        if address in known:
            return known[address]
    host = address.rsplit(":", 1)[0] or "localhost"
    if host in ("127.0.0.1", "0.0.0.0", "[::1]"):
        host = "localhost"
    return f"http://{host}:{DEFAULT_UI_PORT}"


def run_link(address: str, namespace: str, workflow_id: str, *,
             base: str | None = None) -> str | None:
    base = base or ui_base(address)
    return f"{base}/namespaces/{namespace}/workflows/{workflow_id}" if base else None


def remember_dev_ui(address: str, ui: str | None, record: Path | None = None) -> None:
    """What `tower dev` serves at ``address``: its UI's URL, or None (headless)."""
    for path in _records(record):
        known = _recorded(path)
        known[address] = ui
        if address.startswith("127.0.0.1:"):
            known["localhost:" + address.split(":", 1)[1]] = ui
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(known, indent=2, sort_keys=True) + "\n")
        except OSError:  # a read-only home: the project's record still says it
            continue


def _recorded(record: Path) -> dict[str, str | None]:
    try:
        data = json.loads(record.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): (str(v) if v else None) for k, v in data.items()} \
        if isinstance(data, dict) else {}

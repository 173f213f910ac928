"""The demo's Temporal server: the one that answers at the connection settings' address, else
the embedded dev server (`tower dev`'s) started in the background and stopped afterwards."""

from __future__ import annotations

import contextlib
import socket
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass

from temporalio.client import Client

from tower.cli.devserver import DATA_DIR, dev_server_command, prepare, wait_for_server
from tower.client import connect
from tower.client.connection import ServerUnreachable, connect_config

UI_PORT = 8233  # the Web UI's usual port


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

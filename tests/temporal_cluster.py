"""The real Temporal server as a multi-process cluster, started the way docs/production.md
says: `deploy/build-temporal.sh`, `deploy/temporal/schema.sh`, then `temporal-server start`
per process with deploy/temporal/server.env (the file docker-compose.yml passes to its
server containers) plus what differs per host: the database, ports, the dynamic config's
path. The processes find each other through PostgreSQL (ringpop's membership table)."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from pgserver import Postgres
from procs import REPO

DEPLOY = REPO / "deploy"
SERVICES = ("FRONTEND", "HISTORY", "MATCHING", "WORKER")
_GIVEN: set[int] = set()


def server_env_file() -> dict[str, str]:
    """deploy/temporal/server.env as a dict (KEY=VALUE lines; # comments)."""
    lines = (DEPLOY / "temporal" / "server.env").read_text().splitlines()
    pairs = [line.split("=", 1) for line in lines if line.strip() and not line.startswith("#")]
    return {k.strip(): v.strip() for k, v in pairs}


def free_port() -> int:
    """A free port below 32768: the membership table stores ports as a PostgreSQL smallint,
    and the kernel's ephemeral ports (what binding port 0 gives) are all above it."""
    while True:
        port = random.randrange(20000, 32000)
        if port in _GIVEN:  # not bound yet by the process it was given to
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            _GIVEN.add(port)
            return port


def go_missing() -> bool:
    """No Go to build with (deploy/build-temporal.sh also looks in /usr/local/go/bin)."""
    go = shutil.which("go") or shutil.which("go", path="/usr/local/go/bin")
    return go is None and not (REPO / ".tower" / "temporal").exists()


def build() -> tuple[Path, float]:
    """The built binaries' directory (cached in .tower/temporal) and the seconds it took."""
    started = time.monotonic()
    out = subprocess.run([str(DEPLOY / "build-temporal.sh")], cwd=REPO, check=True,
                         stdout=subprocess.PIPE, text=True, timeout=3000)
    return Path(out.stdout.strip().splitlines()[-1]), time.monotonic() - started


def create_schemas(bindir: Path, pg: Postgres, log: Path) -> None:
    env = {**os.environ, **server_env_file(), **pg.env(),
           "TEMPORAL_SQL_TOOL": str(bindir / "temporal-sql-tool")}
    with log.open("ab") as out:
        subprocess.run([str(DEPLOY / "temporal" / "schema.sh")], env=env, check=True,
                       stdout=out, stderr=subprocess.STDOUT, timeout=300)


class ServerProcess:
    """One `temporal-server start` (frontend, history, matching and worker services)."""

    def __init__(self, name: str, bindir: Path, pg: Postgres, log_dir: Path,
                 extra: dict[str, str] | None = None) -> None:
        self.name = name
        self.binary = bindir / "temporal-server"
        self.log = log_dir / f"temporal-{name}.log"
        ports = {f"{s}_{kind}_PORT": str(free_port()) for s in SERVICES
                 for kind in ("GRPC", "MEMBERSHIP")}
        self.env = {**os.environ, **server_env_file(), **pg.env(), **ports,
                    "FRONTEND_HTTP_PORT": str(free_port()),
                    "BIND_ON_IP": "127.0.0.1", "TEMPORAL_BROADCAST_ADDRESS": "127.0.0.1",
                    "DYNAMIC_CONFIG_FILE_PATH": str(DEPLOY / "temporal" / "dynamicconfig.yaml"),
                    **(extra or {})}
        self.address = f"127.0.0.1:{ports['FRONTEND_GRPC_PORT']}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ServerProcess:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen([str(self.binary), "start"], env=self.env,
                                         stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        return self

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill9()


class UiServer:
    """The Temporal Web UI server built from its Go module, configured by the same
    environment variables as the temporalio/ui image of docker-compose.yml."""

    def __init__(self, bindir: Path, frontend: str, log_dir: Path,
                 codec_endpoint: str | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = [str(bindir / "temporal-ui-server"), "--root", str(bindir.parent),
                    "--config", "ui-config", "--env", "docker", "start"]
        self.env = {**os.environ, "TEMPORAL_ADDRESS": frontend,
                    "TEMPORAL_UI_PORT": str(self.port), "TEMPORAL_CORS_ORIGINS": self.url,
                    "TEMPORAL_DISABLE_NEWS_FETCH": "true",
                    "TEMPORAL_CODEC_ENDPOINT": codec_endpoint or ""}
        self.log = log_dir / "temporal-ui.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> UiServer:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)

"""Worker "hosts" that share nothing on disk: each `python worker.py` runs in a folder of its
own holding its own copy of the project's code, with its own data directory (tools,
messages, streams, payloads), HOME and copy of the deployment's trust directory (as
docs/production.md has an operator copy it), as a second machine would; where the machine
allows (root), in a network of its own too, reaching only the services its settings name
(tests/netns.py); and a real PostgreSQL for the stores they can share (tests/pgserver.py)."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from netns import Network, loopback_ports, unavailable
from pgserver import Postgres

REPO = Path(__file__).resolve().parent.parent
CACHES = shutil.ignore_patterns("__pycache__")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Postgres]:
    """One PostgreSQL per test process, started when a module first needs it (initdb costs
    seconds of CPU); each module has databases of its own on it (``pg_url``, ``database``)."""
    try:
        import psycopg  # noqa: F401
        server = Postgres().start()
    except (ImportError, RuntimeError, OSError) as exc:
        pytest.skip(f"no PostgreSQL here: {exc}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def pg_url(pg_server: Postgres) -> str:
    """The module's own database on the shared server: empty when the module starts."""
    return pg_server.database("module")


class Host:
    """One worker host: `python worker.py` on ``task_queue`` in its own directory."""

    def __init__(self, name: str, root: Path, address: str, task_queue: str,
                 **extra: str) -> None:
        self.name, self.dir = name, root / name
        self.project = self.dir / "project"  # its working directory: its copy of the code
        (self.dir / "home").mkdir(parents=True, exist_ok=True)
        if not self.project.exists():
            shutil.copytree(REPO / "workflows", self.project / "workflows", ignore=CACHES)
            shutil.copytree(REPO / "activities", self.project / "activities", ignore=CACHES)
            shutil.copy(REPO / "worker.py", self.project)
        base = {k: v for k, v in os.environ.items()
                if not k.startswith(("OPENAI_", "TEMPORAL_", "TOWER_STORE", "TOWER_MESSAGES",
                                     "TOWER_STREAMS", "TOWER_PAYLOAD", "TOWER_MODEL"))}
        trust = os.environ.get("TOWER_TRUST_DIR")
        if trust:  # the deployment's roster, policy and worker key, copied
            shutil.copytree(trust, self.dir / "trust", dirs_exist_ok=True)
            base["TOWER_TRUST_DIR"] = str(self.dir / "trust")
        self.env = {**base, "TEMPORAL_ADDRESS": address, "HOME": str(self.dir / "home"),
                    "TOWER_DB": str(self.dir / "tools.sqlite"),
                    "PYTHONUNBUFFERED": "1", **extra}
        if "TOWER_STORE_URL" not in extra:
            self.env["TOWER_PAYLOAD_DIR"] = str(self.dir / "payloads")
        self.argv = [sys.executable, "worker.py", "--task-queue", task_queue]
        self.log = self.dir / "worker.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.pids: list[int] = []  # every process this host ran (a worker's identity: pid@)
        self.network: Network | None = None  # made at the first start, kept across restarts

    async def start(self) -> Host:
        """Start the host's worker, unless it runs (a second one would be left behind)."""
        if self.proc is not None and self.proc.poll() is None:
            return self
        start = self.log.stat().st_size if self.log.exists() else 0
        if self.network is None and unavailable() is None:
            self.network = Network(self.name, loopback_ports(self.env))
        argv = self.network.wrap(self.argv) if self.network else self.argv
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(argv, cwd=self.project, env=self.env,
                                         stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        self.pids.append(self.proc.pid)
        async with asyncio.timeout(120):
            while "worker ready" not in self.text(start):
                assert self.proc.poll() is None, f"{self.name} exited: {self.text()[-2000:]}"
                await asyncio.sleep(0.2)
        return self

    def text(self, start: int = 0) -> str:
        return self.log.read_bytes()[start:].decode(errors="replace") if self.log.exists() \
            else ""

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

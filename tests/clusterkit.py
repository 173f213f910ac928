"""The cluster tier's fixtures (a plugin of tests/conftest.py): PostgreSQL, two Temporal
server processes sharing it, `tower setup`, and Tower workers in two processes (one per
frontend), all for the session and started only when a cluster test asks for them.

Every payload is encrypted (TOWER_CODEC_KEYS) and decisions are signed
(TOWER_APPROVAL_SECRET), as in production; models are the loopback OpenAI-compatible
server, reached through the real `openai` SDK."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from pgserver import Postgres
from procs import WorkerProcess
from temporal_cluster import ServerProcess, build, create_schemas, go_missing
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from tower.cli.agents import scripted_reply
from tower.temporal.codec import new_key
from tower.temporal.payloads import tower_data_converter
from tower.testing.model_server import LoopbackModelServer

TOWER = str(Path(sys.executable).parent / "tower")
QUEUE = "tower"  # the default task queue: `tower run` needs no flag


@dataclass
class Cluster:
    servers: list[ServerProcess]
    bindir: Path
    pg: Postgres
    logs: Path
    env: dict[str, str]  # what `tower` commands and workers share (keys, payload store)
    setup_runs: list[tuple[int, str]] = field(default_factory=list)
    build_seconds: float = 0.0

    def tower_env(self, server: int = 0) -> dict[str, str]:
        return {**self.env, "TEMPORAL_ADDRESS": self.servers[server].address}

    async def tower(self, *args: str, server: int = 0, env: dict[str, str] | None = None,
                    timeout: float = 120) -> tuple[int, str]:
        """A `tower` command against server process ``server``: exit code, stdout+stderr."""
        proc = await asyncio.create_subprocess_exec(
            # The example project's commands, run from the cluster's own folder.
            TOWER, "--project", str(Path(__file__).resolve().parents[1]), *args,
            env={**self.tower_env(server), **(env or {})}, cwd=self.logs,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
        return proc.returncode or 0, out.decode()

    async def client(self, server: int = 0) -> Client:
        return await Client.connect(self.servers[server].address,
                                    data_converter=tower_data_converter(env=self.env))

    async def until_polled(self, queue: str, workers: int, seconds: float = 300) -> None:
        """Until ``workers`` distinct processes poll the workflow task queue ``queue``."""
        clients = [await self.client(i) for i in range(len(self.servers))]
        identities: set[str] = set()
        for _ in range(int(seconds * 2)):
            for client in clients:
                described = await client.workflow_service.describe_task_queue(
                    DescribeTaskQueueRequest(
                        namespace=client.namespace, task_queue=TaskQueue(name=queue),
                        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW))
                identities |= {p.identity for p in described.pollers}
            if len(identities) >= workers:
                return
            await asyncio.sleep(0.5)
        raise AssertionError(f"only {identities} poll {queue}")

    def database(self, prefix: str) -> str:
        """A new database of its own on the cluster's PostgreSQL (the stores', the example's
        tools'): its URL."""
        pytest.importorskip("psycopg", reason="pip install 'tower[postgres]'")
        return self.pg.database(prefix)

    def worker(self, server: int, queue: str, model_url: str, name: str,
               **extra: str) -> WorkerProcess:
        worker = WorkerProcess(self.servers[server].address, queue,
                               Path(self.env["TOWER_DB"]), model_url,
                               self.logs / f"worker-{name}.log")
        worker.env.update({**self.env, **extra})
        return worker


async def until_serving(address: str, seconds: float = 180) -> None:
    """Until the frontend at ``address`` answers (a cluster joining its members)."""
    for _ in range(int(seconds * 2)):
        try:
            await Client.connect(address)
            return
        except RuntimeError:
            await asyncio.sleep(0.5)
    raise AssertionError(f"no Temporal frontend answered at {address}")


@pytest.fixture(scope="session")
def temporal_bin() -> tuple[Path, float]:
    if go_missing():
        pytest.skip("Go is not installed: the cluster tier builds the Temporal server from "
                    "the Go module proxy (deploy/build-temporal.sh)")
    return build()


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    pg = Postgres().start()
    try:
        yield pg
    finally:
        pg.stop()


@pytest.fixture(scope="session")
async def cluster(temporal_bin: tuple[Path, float], postgres: Postgres,
                  tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    bindir, seconds = temporal_bin
    logs = tmp_path_factory.mktemp("cluster")
    create_schemas(bindir, postgres, logs / "schema.log")
    # The first process writes the cluster's metadata; the others join it.
    servers = [ServerProcess(name, bindir, postgres, logs) for name in ("a", "b")]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TEMPORAL_"))}
    keys = logs / "codec-keys"  # as docker-compose.yml mounts its secret
    keys.write_text(f"k1={new_key()}")
    env.update({"TOWER_CODEC_KEYS_FILE": str(keys), "TOWER_APPROVAL_SECRET": new_key(),
                "TOWER_PAYLOAD_DIR": str(logs / "payloads"), "TOWER_DB": str(logs / "tools.db"),
                "PYTHONUNBUFFERED": "1"})
    cluster = Cluster(servers, bindir, postgres, logs, env, build_seconds=seconds)
    try:
        for server in servers:
            await until_serving(server.start().address)
        # The runbook's first step, through one frontend, then again through the other.
        cluster.setup_runs.append(await cluster.tower("setup", "--wait", "120", server=0))
        cluster.setup_runs.append(await cluster.tower("setup", server=1))
        yield cluster
    finally:
        for server in servers:
            server.stop()


@pytest.fixture(scope="session")
def cluster_model() -> Iterator[LoopbackModelServer]:
    with LoopbackModelServer(replies=scripted_reply) as srv:
        yield srv


@pytest.fixture(scope="session")
async def cluster_workers(cluster: Cluster, cluster_model: LoopbackModelServer,
                          ) -> AsyncIterator[list[WorkerProcess]]:
    """`python worker.py` twice on the default task queue, one per server process, both
    polling before any test starts a run."""
    pool = [cluster.worker(i, QUEUE, cluster_model.base_url, f"pool-{i}").start()
            for i in range(len(cluster.servers))]
    try:
        await cluster.until_polled(QUEUE, len(pool))
        yield pool
    finally:
        for worker in pool:
            worker.stop()


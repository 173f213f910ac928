"""Shared fixtures: one real Temporal dev server for the session, a fresh task queue
and a fresh tools database per test."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import towercli
from headless import Browser, chromium_path
from hypothesis import settings
from procs import LEAN_GO
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tower.activities.model import ModelSettings
from tower.cli.devserver import STARTUP_TIMEOUT, dynamic_config_args, temporal_binary
from tower.cli.trust_files import dev_trust, enrol
from tower.contract import search
from tower.core.state import AgentState
from worker import build_worker

# Bytecode caches stay on, as by Python's default (__pycache__/ is git-ignored), even where
# PYTHONDONTWRITEBYTECODE is set (CI images, some containers): without them each xdist
# worker rewrites the asserts of every test module it collects (~7 CPU-s each), and every
# `tower` or `python worker.py` a test starts compiles the checkout again. The xdist
# workers, started after this, and every subprocess inherit the environment.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules marked ``long`` first. pytest-xdist hands out whole modules (``--dist
    loadfile``) in collection order; a module of a minute collected last would run alone
    at the end while the other workers sit idle."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)  # a stable sort


# Property tests: CI sees the same examples on every run (a fixed seed, no example
# database); HYPOTHESIS_PROFILE=explore searches afresh with more examples.
settings.register_profile("ci", derandomize=True, database=None, deadline=None)
settings.register_profile("explore", max_examples=2000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


TENANTS = ("tenant-a", "tenant-b")
# The cluster tier's fixtures (PostgreSQL, Temporal server processes, workers); worker
# hosts on their own data directories and a PostgreSQL for the stores they share.
pytest_plugins = ["clusterkit", "storekit"]


@pytest.fixture(scope="session", autouse=True)
def trust(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The deployment's trust directory (roster and policy per tenant) and the approvers'
    own keys, for every worker and CLI the tests start (in-process or as a subprocess)."""
    root = tmp_path_factory.mktemp("trust")
    os.environ["TOWER_TRUST_DIR"] = str(root / "deployment")
    os.environ["TOWER_CONFIG_DIR"] = str(root / "approvers")
    for tenant in ("default", *TENANTS):
        dev_trust(root / "deployment", tenant, config=root / "approvers")
        # A service allowed to send the lifecycle agent its (signed) events.
        enrol(root / "deployment", tenant, "ops-bot", config=root / "approvers",
              events=["lifecycle"])
    return root / "deployment"


@pytest.fixture(scope="session")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    with pytest.MonkeyPatch.context() as server_env:  # the server inherits it at its start
        for name, value in LEAN_GO.items():
            server_env.setenv(name, value)
        environment = await WorkflowEnvironment.start_local(
            dev_server_existing_path=temporal_binary(),  # never download anything
            dev_server_startup_timeout=STARTUP_TIMEOUT,
            data_converter=pydantic_data_converter,
            search_attributes=search.ALL,
            dev_server_log_level="error",
            # Tenants are namespaces: the tenancy tests use these two.
            dev_server_extra_args=[*dynamic_config_args(),
                                   *(arg for ns in TENANTS for arg in ("--namespace", ns))],
        )
    try:
        yield environment
    finally:
        await environment.shutdown()


@pytest.fixture(scope="session", autouse=True)
async def _tower_fork_server() -> AsyncIterator[None]:
    """The CLI tests' fork server (towercli), if one started, is stopped with the session."""
    yield
    await towercli.stop_server()


@pytest.fixture
async def client(env: WorkflowEnvironment) -> Client:
    return env.client


@pytest.fixture
def task_queue(monkeypatch: pytest.MonkeyPatch) -> str:
    queue = f"tq-{uuid.uuid4().hex[:8]}"
    # `tower pending` and the inbox list only the deployment's queues: the test's too.
    monkeypatch.setenv("TOWER_TASK_QUEUES", f"{queue},tower")
    return queue


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "tools.sqlite"


WorkerFactory = Callable[..., Worker]
S = TypeVar("S", bound=AgentState)


@pytest.fixture
def scripted_worker(client: Client, task_queue: str, db_path: Path) -> WorkerFactory:
    """``async with scripted_worker():`` Tower's worker on the test's own task queue and
    tools database, answered by the offline scripted model. ``scripted_worker(other)``
    uses another client; keyword arguments (``models=``, ``workflows=`` ...) go to
    ``build_worker``."""
    def make(on: Client | None = None, **options: Any) -> Worker:
        options.setdefault("models", ModelSettings())
        return build_worker(on or client, task_queue=task_queue, db_path=db_path, **options)
    return make


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    """Headless Chromium with a profile of its own (tests/headless.py); without Chromium
    the test skips, saying why."""
    executable = chromium_path()
    if executable is None:
        pytest.skip("chromium is not installed (`apt-get install chromium`; .ci/run does)")
    b = Browser(tmp_path / "profile", executable)
    try:
        yield b
    finally:
        b.close()


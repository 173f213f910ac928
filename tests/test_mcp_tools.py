"""MCP servers as tool sources, without Temporal: discovery and classification, argument
and result checks, errors, the idempotency key in ``_meta`` — against the real notes
server over stdio and over streamable HTTP."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from mcp_notes.fixtures import SERVER, http_server, http_tenant, stdio_tenant
from temporalio.exceptions import ApplicationError

from tower.activities.mcp import McpConfigError, McpDiscoveryError, TenantMcp, load
from tower.activities.mcp.catalogue import McpTool, McpToolBox, discover
from tower.contract.wire import ToolCall

TOKEN = "s3cret-token"
Listed = Callable[..., TenantMcp]  # the tenant under a policy (``listed``)


@pytest.fixture(scope="module")
def listed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Listed]:
    """``listed(**policy)``: the tenant of one notes server over HTTP for the module's
    classification tests, which list it under many policies (over stdio, each listing
    starts a server process: the MCP SDK's import, ~1.7 CPU-s; stdio listing is the first
    test's)."""
    with pytest.MonkeyPatch.context() as env, http_server(
            tmp_path_factory.mktemp("listed") / "notes.sqlite", TOKEN) as server:
        env.setenv("NOTES_MCP_AUTH", f"Bearer {TOKEN}")
        yield lambda **policy: http_tenant(server.url, **policy)


def deletions(db: Path) -> list[tuple[str, str | None]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT note_id, idempotency_key FROM deletions").fetchall()


async def test_stdio_tools_are_listed_and_classified_by_their_annotations(tmp_path: Path):
    tools = await discover(stdio_tenant(tmp_path / "notes.sqlite"))
    assert sorted(tools) == ["notes.delete_note", "notes.forget_note", "notes.lookup_note",
                             "notes.save_note"]
    lookup, save, delete = (tools[f"notes.{n}"] for n in ("lookup_note", "save_note",
                                                          "delete_note"))
    assert (lookup.read_only, lookup.gated, lookup.retry_after_timeout) == (True, False, True)
    assert (save.idempotent, save.destructive, save.gated) == (True, False, False)
    assert (delete.destructive, delete.gated, delete.retry_after_timeout) == (True, True, False)
    assert delete.schema().parameters["required"] == ["note_id"]
    assert delete.source == "mcp:notes"


async def test_the_tenant_policy_overrides_the_annotations_explicitly(listed: Listed):
    tenant = listed(tools={"notes.delete_note": {"gate": False, "honours_idempotency_key": True}})
    delete = (await discover(tenant))["notes.delete_note"]
    assert (delete.gated, delete.retry_after_timeout) == (False, True)
    wrong = listed(tools={"notes.no_such_tool": {"gate": False}})
    with pytest.raises(McpDiscoveryError, match="notes.no_such_tool"):
        await discover(wrong)


async def test_a_servers_hints_are_trusted_only_when_the_deployment_says_so(listed: Listed):
    """``forget_note`` deletes but claims ``readOnlyHint``. By default every tool of a server
    is a gated write, not retried once it may have acted, its key sent in ``_meta``: the
    server's hints cannot loosen that. Trusted (``trust_hints``), the hints decide. The
    deployment may mark a tool read-only itself; a server's hint that it writes still wins."""
    facts = ("read_only", "destructive", "idempotent", "gated", "retry_after_timeout")

    def of(tool: McpTool) -> tuple[bool, ...]:
        return tuple(getattr(tool, f) for f in facts)

    write = (False, True, False, True, False)  # gated, never retried once it may have acted
    untrusted = await discover(listed(trust_hints=False))
    assert {name: of(t) for name, t in untrusted.items()} == dict.fromkeys(untrusted, write)
    assert not any(t.trusted_hints for t in untrusted.values())
    trusted = await discover(listed())
    assert of(trusted["notes.forget_note"]) == (True, False, True, False, True)  # as it says
    assert of(trusted["notes.save_note"]) == (False, False, True, False, True)
    said = await discover(listed(trust_hints=False, tools={
        "notes.lookup_note": {"read_only": True}, "notes.delete_note": {"read_only": True}}))
    assert of(said["notes.lookup_note"]) == (True, False, True, False, True)
    assert of(said["notes.delete_note"]) == write  # its server says it destroys: stricter
    assert of(said["notes.forget_note"]) == write
    # Trusted hints, and the deployment knows better: forget_note is not read-only.
    known = await discover(listed(tools={"notes.forget_note": {"read_only": False}}))
    assert of(known["notes.forget_note"]) == write


async def test_calls_over_http_with_the_secret_header(tmp_path: Path, monkeypatch):
    db = tmp_path / "notes.sqlite"
    with http_server(db, TOKEN) as server:
        monkeypatch.setenv("NOTES_MCP_AUTH", f"Bearer {TOKEN}")
        tenant = http_tenant(server.url)
        tools = await discover(tenant)
        box = McpToolBox(tenant, tools)
        saved = await box.call(tools["notes.save_note"], ToolCall(
            tool="notes.save_note", arguments={"note_id": "n1", "text": "hello"},
            idempotency_key="k-save"))
        assert saved == {"id": "n1", "saved": True}
        found = await box.call(tools["notes.lookup_note"], ToolCall(
            tool="notes.lookup_note", arguments={"note_id": "n1"}, idempotency_key="k-look"))
        assert found == {"id": "n1", "text": "hello"}
        for _ in range(2):  # a repeat with the same key acts once
            await box.call(tools["notes.delete_note"], ToolCall(
                tool="notes.delete_note", arguments={"note_id": "n1"}, idempotency_key="k-del"))
        assert deletions(db) == [("n1", "k-del")]
        await box.close()
        # Without the secret the server refuses: listing fails with the server named.
        monkeypatch.setenv("NOTES_MCP_AUTH", "Bearer wrong")
        with pytest.raises(McpDiscoveryError, match="'notes' could not be listed"):
            await discover(tenant)
    monkeypatch.delenv("NOTES_MCP_AUTH")
    with pytest.raises(McpConfigError, match="NOTES_MCP_AUTH not set"):
        tenant.servers["notes"].header_values()


async def test_bad_arguments_are_refused_before_the_call(tmp_path: Path):
    db = tmp_path / "notes.sqlite"
    tenant = stdio_tenant(db)
    tools = await discover(tenant)
    with pytest.raises(ApplicationError) as refused:
        await McpToolBox(tenant, tools).call(tools["notes.delete_note"], ToolCall(
            tool="notes.delete_note", arguments={"note_id": 7}, idempotency_key="k"))
    assert refused.value.type == "BadToolArguments" and refused.value.non_retryable
    assert "note_id: 7 is not of type 'string'" in str(refused.value)
    assert not db.exists() or deletions(db) == []


async def test_tool_errors_come_back_as_results_and_big_results_are_bounded(tmp_path: Path):
    tenant = stdio_tenant(tmp_path / "notes.sqlite")
    tools = await discover(tenant)
    box = McpToolBox(tenant, tools)
    missing = await box.call(tools["notes.lookup_note"], ToolCall(
        tool="notes.lookup_note", arguments={"note_id": "nope"}, idempotency_key="k1"))
    assert missing["is_error"] is True and "lookup_note" in missing["content"]
    await box.call(tools["notes.save_note"], ToolCall(
        tool="notes.save_note", arguments={"note_id": "big", "text": "x" * 5000},
        idempotency_key="k2"))
    small = McpToolBox(tenant, tools, max_result_bytes=1000)
    bounded = await small.call(tools["notes.lookup_note"], ToolCall(
        tool="notes.lookup_note", arguments={"note_id": "big"}, idempotency_key="k3"))
    assert bounded["is_error"] is True and "over the limit of 1000" in bounded["content"]
    await box.close()
    await small.close()


async def test_an_unreachable_server_is_retryable_and_named(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("NOTES_MCP_AUTH", "Bearer x")
    tenant = http_tenant("http://127.0.0.1:9/mcp")
    with pytest.raises(McpDiscoveryError, match="'notes' could not be listed"):
        await discover(tenant)


def test_config_file_per_tenant_and_bad_files(tmp_path: Path):
    file = tmp_path / "mcp.json"
    file.write_text('{"tenants": {"acme": {"servers": {"notes": {"url": "http://h/mcp"}}}}}')
    assert list(load("acme", file).servers) == ["notes"]
    assert load("other", file).servers == {}
    file.write_text('{"tenants": {"acme": {"servers": {"notes": {"url": "x", "command": ["a"]}}}}}')
    with pytest.raises(McpConfigError, match="exactly one of"):
        load("acme", file)
    with pytest.raises(McpConfigError, match="no such MCP configuration file"):
        load("acme", tmp_path / "missing.json")


async def test_tower_tools_lists_built_in_and_mcp_tools_with_their_gates(tmp_path: Path) -> None:
    """`tower tools --json`: the notes server's tools beside the built-in ones, classified by
    their annotations, and which agent nodes use them behind a gate."""
    import json
    import os
    import sys

    from towercli import tower_cli

    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"tenants": {"default": {"servers": {"notes": {
        "command": [sys.executable, str(SERVER), "--db", str(tmp_path / "notes.sqlite")],
        "trust_hints": True}}, "tools": {"notes.forget_note": {"read_only": False}}}}}))
    # The agents: the example project's (found from the tests' folder, as a user's project
    # is found from its own) and the notes agents beside these tests.
    env = {**os.environ, "TOWER_MCP_CONFIG": str(config), "TEMPORAL_NAMESPACE": "default"}
    tests = Path(__file__).parent
    agents = ["--agents", "workflows,mcp_notes.agent"]
    code, out, err = await tower_cli([*agents, "tools", "--json"], env=env, cwd=tests)
    assert code == 0, err
    rows = {r["tool"]: r for r in json.loads(out)["tools"]}
    assert rows["issue_refund"]["source"] == "built-in"
    assert rows["issue_refund"]["kind"] == "side effect"
    assert (rows["notes.lookup_note"]["kind"], rows["notes.lookup_note"]["gated"]) == (
        "read-only", "no")
    delete = rows["notes.delete_note"]
    assert (delete["source"], delete["kind"], delete["gated"]) == (
        "mcp:notes", "destructive", "required")
    assert "notes_cleanup:delete (gated)" in delete["used_by"]
    assert delete["retried_after_timeout"] is False and delete["hints"] == "trusted"
    forget = rows["notes.forget_note"]  # claims read-only; the deployment says it is not
    assert (forget["kind"], forget["gated"], forget["retried_after_timeout"]) == (
        "destructive", "required", False)
    # A broken config is one clear line, not a traceback.
    config.write_text("{not json")
    code, out, err = await tower_cli([*agents, "tools"], env=env, cwd=tests)
    assert code != 0 and "Traceback" not in err and "mcp.json" in err, err

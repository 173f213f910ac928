"""Tower on a real multi-process Temporal cluster: two `temporal-server` processes built from
the Go module proxy, sharing PostgreSQL (persistence and SQL visibility), and workers in
several processes. Each step is a command of docs/production.md."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from clusterkit import QUEUE, TOWER, Cluster, until_serving
from gatekit import decision, recorded, refunds, wait_pending
from headless import Browser, chromium_path
from procs import WorkerProcess, free_port
from temporal_cluster import DEPLOY, UiServer, server_env_file
from temporalio.api.batch.v1 import BatchOperationSignal
from temporalio.api.common.v1 import Header, Payload, Payloads, WorkflowExecution, WorkflowType
from temporalio.api.enums.v1 import EventType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    GetClusterInfoRequest,
    SignalWithStartWorkflowExecutionRequest,
    SignalWorkflowExecutionRequest,
    StartBatchOperationRequest,
)
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode
from test_faults_process import TEXT, assert_effects_once, started_attempts
from test_web_ui import ARTIFACTS

from tower.cli.agents import scripted_reply
from tower.cli.demo import requests
from tower.cli.devserver import temporal_binary
from tower.contract import search
from tower.temporal.codec import new_key
from tower.testing.model_server import Fault, LoopbackModelServer

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]
# The demo's inputs that end FAILED on purpose (a loop budget, a declined card).
FAILS_ON_PURPOSE = {"Check account ACC-9999 please", "tok_declined"}
REFUND = json.dumps({"message": "Please refund $1,200 on invoice INV-2004"})


def psql(cluster: Cluster, sql: str, db: str = "temporal") -> str:
    env = {**os.environ, "PGPASSWORD": cluster.pg.password}
    return subprocess.run(
        ["psql", "-h", "127.0.0.1", "-p", str(cluster.pg.port), "-U", "temporal", "-d", db,
         "-At", "-c", sql], env=env, check=True, capture_output=True, text=True).stdout


async def agent_status(handle: WorkflowHandle[Any, Any], seconds: float = 240) -> str:
    """The run's status from visibility once it is DONE or FAILED (search.run_status: a
    closed execution's own, or the FAILED the run published)."""
    status = None
    for _ in range(int(seconds * 2)):
        described = await handle.describe()
        status = search.run_status(described.status, described.typed_search_attributes)
        if status in ("DONE", "FAILED"):
            return str(status)
        await asyncio.sleep(0.5)
    raise AssertionError(f"{handle.id} never ended; AgentStatus is {status}")


@pytest.fixture(scope="session")
async def demo_runs(cluster: Cluster, cluster_workers: list[WorkerProcess]) -> dict[str, str]:
    """Every demo input (tower/cli/demo.py), half started through each server process:
    run id -> the AgentStatus it ended with."""
    clients = [await cluster.client(0), await cluster.client(1)]
    handles: list[WorkflowHandle[Any, Any]] = []
    for i, (agent, request, _) in enumerate(requests()):
        handles.append(await clients[i % 2].start_workflow(
            agent, request, id=f"demo-{agent}-{uuid.uuid4().hex[:6]}", task_queue=QUEUE))
    statuses = await asyncio.gather(*(agent_status(h) for h in handles))
    return {h.id: s for h, s in zip(handles, statuses, strict=True)}


async def test_setup_makes_the_bare_cluster_ready_and_changes_nothing_the_second_time(
    cluster: Cluster,
) -> None:
    (first_code, first), (second_code, second) = cluster.setup_runs
    assert first_code == 0, first
    assert "changed: added search attributes to default: AgentCostUsd, AgentError" in first
    assert second_code == 0 and "nothing to change" in second, second
    # The schema job is idempotent too: run again, it changes nothing and succeeds.
    env = {**os.environ, **server_env_file(), **cluster.pg.env(),
           "TEMPORAL_SQL_TOOL": str(cluster.bindir / "temporal-sql-tool")}
    again = subprocess.run([str(DEPLOY / "temporal" / "schema.sh")], env=env,
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    # Each process runs deploy/temporal/server.env (docker-compose.yml's env_file) and
    # deploy/temporal/dynamicconfig.yaml, and answers the compose file's health check.
    compose = yaml.safe_load((DEPLOY.parent / "docker-compose.yml").read_text())
    check = compose["x-temporal-server"]["healthcheck"]["test"][-1]
    for server in cluster.servers:
        assert server.proc is not None
        raw = Path(f"/proc/{server.proc.pid}/environ").read_bytes().split(b"\0")
        environ = dict(e.decode().split("=", 1) for e in raw if b"=" in e)
        assert server_env_file().items() <= environ.items()
        assert environ["DYNAMIC_CONFIG_FILE_PATH"] == \
            str(DEPLOY / "temporal" / "dynamicconfig.yaml")
        url = check.replace(":7243/", f":{environ['FRONTEND_HTTP_PORT']}/")
        with urllib.request.urlopen(url, timeout=30) as reply:
            assert "default" in reply.read().decode()
    versions = dict(line.split("=", 1) for line in
                    (DEPLOY / "temporal" / "versions.env").read_text().splitlines()
                    if line and not line.startswith("#"))
    info = await (await cluster.client(1)).workflow_service.get_cluster_info(
        GetClusterInfoRequest())
    assert info.server_version == versions["TEMPORAL_VERSION"]
    # One cluster, not two servers: every service role has a member in each process.
    members = psql(cluster, "SELECT role, COUNT(DISTINCT rpc_port) FROM cluster_membership "
                            "WHERE record_expiry > now() GROUP BY role ORDER BY role")
    assert members.split() == ["1|2", "2|2", "3|2", "4|2"], members


async def test_every_demo_agent_runs_to_its_end_on_workers_in_two_processes(
    cluster: Cluster, demo_runs: dict[str, str],
) -> None:
    expected = {}
    for run_id, (_agent, request, _) in zip(demo_runs, requests(), strict=True):
        fails = any(s in request.model_dump_json() for s in FAILS_ON_PURPOSE)
        expected[run_id] = "FAILED" if fails else "DONE"
    assert demo_runs == expected
    assert {agent for agent, _, _ in requests()} <= {r.split("-")[1] for r in demo_runs}
    # Both worker processes did work (their identities are pid@host).
    client = await cluster.client()
    identities = set()
    for run_id in demo_runs:
        async for event in client.get_workflow_handle(run_id).fetch_history_events():
            if event.HasField("workflow_task_completed_event_attributes"):
                identities.add(event.workflow_task_completed_event_attributes.identity)
            if event.HasField("activity_task_started_event_attributes"):
                identities.add(event.activity_task_started_event_attributes.identity)
    assert len(identities) >= 2, identities


async def test_list_queries_find_the_runs_through_sql_visibility(
    cluster: Cluster, demo_runs: dict[str, str],
) -> None:
    done = sorted(r for r, s in demo_runs.items() if s == "DONE" and "-support-" in r)
    out = subprocess.run(
        [temporal_binary(), "workflow", "list", "--address", cluster.servers[1].address,
         "--query", "AgentName='support' AND ExecutionStatus='Completed'", "--output", "json"],
        check=True, capture_output=True, text=True, timeout=60).stdout
    listed = {r["execution"]["workflowId"] for r in json.loads(out)} & set(demo_runs)
    assert sorted(listed) == done and len(done) == 2
    out = subprocess.run(
        [temporal_binary(), "workflow", "count", "--address", cluster.servers[0].address,
         "--query", "ExecutionStatus='Completed' AND AgentName IS NOT NULL"],
        check=True, capture_output=True, text=True, timeout=60).stdout
    assert out.split()[-1] == str(list(demo_runs.values()).count("DONE")), out


async def test_a_gated_refund_is_approved_after_a_server_process_is_killed(
    cluster: Cluster, cluster_workers: list[WorkerProcess],
) -> None:
    earlier = paid(cluster)
    run_id = f"refund-{uuid.uuid4().hex[:6]}"
    code, out = await cluster.tower("run", "refund", "--input", REFUND, "--id", run_id,
                                    "--no-follow", server=0)
    assert code == 0, out
    handle = (await cluster.client(0)).get_workflow_handle(run_id)
    for _ in range(240):
        if (await handle.query("approvals", result_type=dict))["pending"]:
            break
        await asyncio.sleep(0.5)
    else:
        raise AssertionError("the refund never reached its gate")
    victim = cluster.servers[1]
    victim.kill9()
    victim.start()
    await until_serving(victim.address)
    # The workers reconnect (the one that used the killed process too) before the decision.
    await cluster.until_polled(QUEUE, len(cluster_workers))
    # The decision goes through the restarted process.
    code, out = await cluster.tower("approve", "--yes",
                                    run_id, "--by", "alice", "--role", "manager",
                                    server=1, timeout=240)
    assert code == 0 and "status: DONE" in out, out
    assert await agent_status(handle) == "DONE"
    assert paid(cluster) == [*earlier, ("INV-2004", 120000)]


async def test_a_worker_killed_mid_step_is_replaced_by_another_process(
    cluster: Cluster,
) -> None:
    queue, db = f"kill-{uuid.uuid4().hex[:6]}", cluster.logs / f"kill-{uuid.uuid4().hex}.db"
    with LoopbackModelServer(replies=scripted_reply) as model:
        model.inject(Fault("slow", seconds=60))  # the first model call hangs: kill meanwhile
        first = cluster.worker(0, queue, model.base_url, "first", TOWER_DB=str(db)).start()
        second = cluster.worker(1, queue, model.base_url, "second", TOWER_DB=str(db))
        try:
            client = await cluster.client(1)
            handle = await client.start_workflow(
                "order", {"text": TEXT}, id=f"order-{uuid.uuid4().hex[:6]}", task_queue=queue)
            for _ in range(480):
                if model.served:
                    break
                await asyncio.sleep(0.25)
            first.kill9()  # inside the model call of the `parse` step
            second.start()
            assert await agent_status(handle) == "DONE"
        finally:
            first.stop()
            second.stop()
    assert [s.outcome for s in model.served if s.node == "parse"] == ["slow", "ok"]
    assert await started_attempts(handle, "call_model") == [2, 1]  # the retry finished
    assert_effects_once(db, 1)
    assert second.unhandled() == []


async def test_the_web_ui_shows_the_runs_decoded_through_the_codec_server(
    cluster: Cluster, demo_runs: dict[str, str], tmp_path: Path,
) -> None:
    executable = chromium_path()
    if executable is None:
        pytest.skip("chromium is not installed (`apt-get install chromium`; .ci/run does)")
    codec_port, token = free_port(), uuid.uuid4().hex
    # The token rides in the endpoint's path: the UI's pages pass it on every call.
    ui = UiServer(cluster.bindir, cluster.servers[1].address, cluster.logs,
                  codec_endpoint=f"http://127.0.0.1:{codec_port}/{token}")
    codec = await asyncio.create_subprocess_exec(
        TOWER, "codec-server", "--port", str(codec_port), "--ui-url", ui.url,
        env={**cluster.tower_env(), "TOWER_CODEC_TOKEN": token}, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    ui.start()
    browser = None
    try:
        account = next(r for r in demo_runs if "-account-" in r)
        browser = await asyncio.to_thread(Browser, tmp_path / "chromium", executable)
        await asyncio.to_thread(browser.open, f"{ui.url}/namespaces/default/workflows")
        listed = await asyncio.to_thread(browser.wait_for_text, *demo_runs, seconds=120)
        await asyncio.to_thread(browser.screenshot, ARTIFACTS / "cluster-web-ui-list.png")
        await asyncio.to_thread(browser.open,
                                f"{ui.url}/namespaces/default/workflows/{account}")
        # The run's input, decrypted in the browser by `tower codec-server`.
        page = await asyncio.to_thread(browser.wait_for_text, account, "ACC-1001",
                                       seconds=120)
        await asyncio.to_thread(browser.screenshot, ARTIFACTS / "cluster-web-ui-run.png")
    finally:
        if browser is not None:
            await asyncio.to_thread(browser.close)
        ui.stop()
        codec.terminate()
        await codec.wait()
    assert all(r in listed for r in demo_runs) and "COMPLETED" in listed
    assert "binary/encrypted" not in page


async def test_a_failed_run_is_recovered_by_an_operator(
    cluster: Cluster, cluster_workers: list[WorkerProcess],
) -> None:
    """Out of stock: the run is a failed workflow execution (SQL visibility finds it by
    ExecutionStatus); the stock arrives; `tower retry` resets it and it goes on to DONE."""
    run_id = f"order-{uuid.uuid4().hex[:6]}"
    code, out = await cluster.tower(
        "run", "order", "--input", json.dumps({"text": "2 x GIZMO-3 to 3 Ash Row, US"}),
        "--id", run_id, "--no-follow", server=1)
    assert code == 0, out
    client = await cluster.client(1)
    handle = client.get_workflow_handle(run_id)
    assert await agent_status(handle) == "FAILED"
    assert (await handle.describe()).status == WorkflowExecutionStatus.FAILED
    query = f"WorkflowId = '{run_id}' AND ExecutionStatus = 'Failed' AND AgentStatus = 'FAILED'"
    found: list[str] = []
    for _ in range(60):
        found = [wf.id async for wf in client.list_workflows(query)]
        if found:
            break
        await asyncio.sleep(0.5)
    assert found == [run_id]
    with sqlite3.connect(cluster.env["TOWER_DB"]) as db:
        db.execute("UPDATE products SET stock = 5 WHERE sku='GIZMO-3'")
    code, out = await cluster.tower("retry", run_id, "--from", "check_stock", "--by", "ops",
                                    server=0, timeout=240)
    assert code == 0 and "(before it entered check_stock): new run" in out, out
    assert "status: DONE" in out, out
    assert await agent_status(handle) == "DONE"
    assert (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED


async def test_rotating_the_codec_key_keeps_earlier_runs_readable(
    cluster: Cluster, cluster_model: LoopbackModelServer,
) -> None:
    queue = f"rotate-{uuid.uuid4().hex[:6]}"
    ask = json.dumps({"question": "Check my account ACC-1001"})
    before, after = f"account-{uuid.uuid4().hex[:6]}", f"account-{uuid.uuid4().hex[:6]}"
    worker = cluster.worker(0, queue, cluster_model.base_url, "rotate-old").start()
    try:
        code, out = await cluster.tower("run", "account", "--input", ask, "--id", before,
                                        "--task-queue", queue)
        assert code == 0 and "status: DONE" in out, out
    finally:
        worker.stop()
    # The new key first (it encrypts), the old one kept (it still decrypts).
    rotated = cluster.logs / "codec-keys-rotated"
    old = Path(cluster.env["TOWER_CODEC_KEYS_FILE"]).read_text().strip()
    rotated.write_text(f"k2={new_key()},{old}")
    keys = {"TOWER_CODEC_KEYS_FILE": str(rotated)}
    worker = cluster.worker(1, queue, cluster_model.base_url, "rotate-new", **keys).start()
    try:
        code, out = await cluster.tower("run", "account", "--input", ask, "--id", after,
                                        "--task-queue", queue, env=keys)
        assert code == 0 and "status: DONE" in out, out
        code, out = await cluster.tower("state", before, env=keys)
        assert code == 0 and "ACC-1001" in out, out
    finally:
        worker.stop()
    raw = await Client.connect(cluster.servers[0].address)  # no codec: what the server holds
    for run_id, key_id in ((before, b"k1"), (after, b"k2")):
        history = await raw.get_workflow_handle(run_id).fetch_history()
        started = history.events[0].workflow_execution_started_event_attributes
        payload = started.input.payloads[0]
        assert payload.metadata["encryption-key-id"] == key_id
        assert b"ACC-1001" not in payload.data


# Tower's server build refuses a signal over this many bytes (deploy/temporal/server).
SIGNAL_MAX_BYTES = int(server_env_file()["TOWER_SIGNAL_MAX_BYTES"])
OVER_LIMIT = "TOWER_SIGNAL_MAX_BYTES"  # named in the guard's refusal
# The server's own refusals: the run's signal cap, or the run closing (carrying over) as the
# signal arrived; neither reaches a history.
REFUSED = ("exceeded workflow execution limit for signal events", "workflow is closing")
WARN_BYTES = 10 * 1024 * 1024  # Temporal's history warning size


def paid(cluster: Cluster) -> list[tuple[Any, ...]]:
    """The refunds in the cluster's tools database (shared by every test of the tier)."""
    return refunds(Path(cluster.env["TOWER_DB"]))


async def parked_refund(cluster: Cluster
                        ) -> tuple[WorkflowHandle[Any, Any], dict[str, Any], str]:
    """A $1,200 refund waiting at its gate, on an invoice of its own (INV-2004's balance is
    for the other tests), and that invoice."""
    with sqlite3.connect(cluster.env["TOWER_DB"]) as db:
        invoice = f"INV-{7000 + db.execute('SELECT COUNT(*) FROM invoices').fetchone()[0]}"
        db.execute("INSERT INTO invoices VALUES (?, 'ACC-1003', 240000, 'paid', '2026-11-15')",
                   (invoice,))
    run_id = f"refund-{uuid.uuid4().hex[:6]}"
    ask = json.dumps({"message": f"Please refund $1,200 on invoice {invoice}"})
    code, out = await cluster.tower("run", "refund", "--input", ask, "--id", run_id,
                                    "--no-follow")
    assert code == 0, out
    handle = (await cluster.client(0)).get_workflow_handle(run_id)
    return handle, (await wait_pending(handle, timeout=240))["pending"], invoice


def signal_of(run: str, data: bytes, **fields: Any) -> SignalWorkflowExecutionRequest:
    """A `decision` signal carrying ``data`` as its one payload, as anyone may send it."""
    return SignalWorkflowExecutionRequest(
        namespace="default", workflow_execution=WorkflowExecution(workflow_id=run),
        signal_name="decision", input=Payloads(payloads=[Payload(data=data)]),
        identity=fields.pop("identity", "mallory"), **fields)


def signal_sized(run: str, size: int) -> SignalWorkflowExecutionRequest:
    """A signal of exactly ``size`` bytes as the guard counts them (input, header, identity,
    name)."""
    def counted(r: SignalWorkflowExecutionRequest) -> int:
        return r.input.ByteSize() + r.header.ByteSize() + len(r.identity) + len(r.signal_name)

    n = size - counted(signal_of(run, b""))
    while counted(signal_of(run, b"x" * n)) > size:  # the length's own varint grew
        n -= 1
    request = signal_of(run, b"x" * n, identity="m" * (size - counted(signal_of(run, b"x" * n))
                                                       + len("mallory")))
    assert counted(request) == size
    return request


async def test_a_signal_over_the_byte_limit_is_refused_before_the_history(
    cluster: Cluster, cluster_workers: list[WorkerProcess],
) -> None:
    """Temporal bounds a signal's input (2 MB) but not its header, and a run's signals by
    count, not bytes: on a stock server 18 signals of 3 MB headers ended a parked run (its
    history passed 50 MB). Tower's build refuses every signal path over the limit at the
    frontend; nothing reaches the run, which then takes a real decision by signal."""
    handle, pending, invoice = await parked_refund(cluster)
    earlier = paid(cluster)
    client = await cluster.client(1)
    run, service = handle.id, client.workflow_service
    before = await recorded(handle)
    big = Payloads(payloads=[Payload(data=b"x" * 1_900_000)])
    attacks: dict[str, Any] = {
        "input under the 2 MB blob limit": service.signal_workflow_execution(
            signal_of(run, b"x" * 1_900_000)),
        "header of 3 MB": service.signal_workflow_execution(signal_of(
            run, b"{}", header=Header(fields={"_tracer-data": Payload(data=b"x" * 3_000_000)}))),
        "one byte over": service.signal_workflow_execution(
            signal_sized(run, SIGNAL_MAX_BYTES + 1)),
        "signal-with-start": service.signal_with_start_workflow_execution(
            SignalWithStartWorkflowExecutionRequest(
                namespace="default", workflow_id=run, workflow_type=WorkflowType(name="refund"),
                task_queue=TaskQueue(name=QUEUE), signal_name="decision", signal_input=big,
                identity="mallory", request_id=uuid.uuid4().hex)),
        "batch signal": service.start_batch_operation(StartBatchOperationRequest(
            namespace="default", job_id=uuid.uuid4().hex, reason="flood",
            executions=[WorkflowExecution(workflow_id=run)],
            signal_operation=BatchOperationSignal(signal="decision", input=big,
                                                  identity="mallory"))),
    }
    for name, attack in attacks.items():
        with pytest.raises(RPCError) as refused:
            await attack
        assert refused.value.status == RPCStatusCode.INVALID_ARGUMENT, name
        assert OVER_LIMIT in refused.value.message, (name, refused.value.message)
    assert await recorded(handle) == before and paid(cluster) == earlier
    await service.signal_workflow_execution(signal_sized(run, SIGNAL_MAX_BYTES))  # at it: taken
    # alice's signed decision, by signal (`temporal workflow signal`'s path), fits easily.
    await handle.signal("decision", decision(client, run, pending))
    assert await agent_status(handle) == "DONE"
    assert paid(cluster) == [*earlier, (invoice, 120000)]


async def test_a_flood_of_the_largest_signals_leaves_every_run_under_the_warning_size(
    cluster: Cluster, cluster_workers: list[WorkerProcess],
) -> None:
    """1,500 forged signals of exactly the largest size the server takes: each run of the
    chain holds at most the per-run cap of them, so its history stays under Temporal's
    10 MiB warning size, and the refund is then paid once."""
    handle, _, invoice = await parked_refund(cluster)
    earlier = paid(cluster)
    client = await cluster.client(0)
    first_run = (await handle.describe()).run_id
    request = signal_sized(handle.id, SIGNAL_MAX_BYTES)
    refused = 0
    for _ in range(0, 1500, 250):
        sent = await asyncio.gather(*(client.workflow_service.signal_workflow_execution(request)
                                      for _ in range(250)), return_exceptions=True)
        for error in (e for e in sent if isinstance(e, BaseException)):
            assert isinstance(error, RPCError) and any(r in error.message for r in REFUSED), \
                error
            refused += 1
    # The chain's current run (the flood made it carry over) takes alice's decision.
    pending = (await wait_pending(handle, timeout=240))["pending"]
    out = await handle.execute_update("decide", decision(client, handle.id, pending),
                                      result_type=dict)
    assert out["result"] == "approved" and await agent_status(handle) == "DONE"
    sizes, signals = [], 0
    run_id: str | None = first_run
    while run_id:
        run = client.get_workflow_handle(handle.id, run_id=run_id)
        sizes.append((await run.describe()).raw_description.workflow_execution_info
                     .history_size_bytes)
        history = await run.fetch_history()
        signals += sum(1 for e in history.events
                       if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED)
        last = history.events[-1].workflow_execution_continued_as_new_event_attributes
        run_id = last.new_execution_run_id or None
    assert len(sizes) > 1 and max(sizes) < WARN_BYTES, sizes
    assert signals + refused == 1500, (signals, refused)
    assert paid(cluster) == [*earlier, (invoice, 120000)]

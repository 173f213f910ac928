"""Server authorization on Tower's build of the Temporal server (docs/production.md, "Server
authorization"): the frontend checks every call's JWT with Tower's claim mapper and
authorizer. A requester may start the deployment's agents on its queues and nothing more;
approvers (`tower approve`, the inbox) and Tower's worker signal and update runs; only
operators reset, terminate, delete and run batches; only the cluster's admin changes a
namespace; a token for another audience is refused. Tokens are minted here from a test
key, as a deployment's issuer would, each for the deployment's audience.

A cluster of its own (its own PostgreSQL, a server process with authorization on and the
internal frontend its system worker uses), so the open cluster of tests/test_cluster.py is
not disturbed."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from clusterkit import TOWER, until_serving
from gatekit import decision, recorded, refunds, wait_pending
from joserfc import jwt
from joserfc.jwk import ECKey
from pgserver import Postgres
from procs import REPO, WorkerProcess
from temporal_cluster import ServerProcess, create_schemas, free_port
from temporalio.api.batch.v1 import BatchOperationTermination
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType, TaskQueueType
from temporalio.api.namespace.v1 import UpdateNamespaceInfo
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    DeleteWorkflowExecutionRequest,
    DescribeTaskQueueRequest,
    ResetWorkflowExecutionRequest,
    StartBatchOperationRequest,
    UpdateNamespaceRequest,
)
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from tower.cli.agents import scripted_reply
from tower.temporal.codec import new_key
from tower.temporal.payloads import tower_data_converter
from tower.testing.model_server import LoopbackModelServer

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]
QUEUE = "tower"
REFUND = json.dumps({"message": "Please refund $1,200 on invoice INV-2004"})
AUDIENCE = "tower-test"  # TOWER_AUTH_AUDIENCE: every token of the deployment names it
# An approver's `tower approve` and the inbox hold the same role, each its own token.
ROLES = {"admin": "temporal-system:admin", "service": "default:service",
         "requester": "default:requester", "operator": "default:operator",
         "approver": "default:approver", "inbox": "default:approver"}


def mint(key: ECKey, sub: str, permission: str, lifetime: int = 3600,
         audience: str | None = AUDIENCE) -> str:
    now = int(time.time())
    claims: dict[str, Any] = {"sub": sub, "iat": now, "exp": now + lifetime,
                              "permissions": [permission]}
    if audience is not None:
        claims["aud"] = audience
    return jwt.encode({"alg": "ES256", "kid": key.kid}, claims, key)


@dataclass
class AuthCluster:
    server: ServerProcess
    logs: Path
    env: dict[str, str]  # what workers and `tower` commands share (keys, payload store)
    tokens: dict[str, str]  # role -> a token of that role (and "forged": a foreign key's)

    def token_file(self, role: str) -> str:
        path = self.logs / f"{role}.jwt"
        path.write_text(self.tokens[role])
        return str(path)

    async def client(self, role: str | None) -> Client:
        """A client sending ``role``'s token (None: no token at all). Lazy: a token the
        server refuses fails the first call (the connection's own system-info call)."""
        meta = {"authorization": f"Bearer {self.tokens[role]}"} if role else {}
        return await Client.connect(self.server.address, rpc_metadata=meta, lazy=True,
                                    data_converter=tower_data_converter(env=self.env))

    async def tower(self, role: str, *args: str, timeout: float = 240) -> tuple[int, str]:
        """A `tower` command with ``role``'s token (TOWER_TEMPORAL_TOKEN_FILE)."""
        env = {**self.env, "TEMPORAL_ADDRESS": self.server.address,
               "TOWER_TEMPORAL_TOKEN_FILE": self.token_file(role)}
        proc = await asyncio.create_subprocess_exec(
            TOWER, *args, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
        return proc.returncode or 0, out.decode()


@pytest.fixture(scope="module")
async def auth_cluster(temporal_bin: tuple[Path, float],
                       tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[AuthCluster]:
    bindir, _ = temporal_bin
    logs = tmp_path_factory.mktemp("cluster-auth")
    key = ECKey.generate_key("P-256", parameters={"kid": "tower-test-1"})
    (logs / "jwks.json").write_text(json.dumps({"keys": [key.as_dict(private=False)]}))
    tokens = {role: mint(key, f"test-{role}", perm) for role, perm in ROLES.items()}
    # Another key under the same key id: what a forger would sign with.
    foreign = ECKey.generate_key("P-256", parameters={"kid": "tower-test-1"})
    tokens["forged"] = mint(foreign, "test-forged", "default:service")
    # The deployment's own key, but minted for another service, or for none.
    tokens["elsewhere"] = mint(key, "test-elsewhere", "default:service", audience="grafana")
    tokens["no-audience"] = mint(key, "test-no-audience", "default:service", audience=None)
    pg = Postgres().start()
    internal = {f"INTERNAL_FRONTEND_{kind}_PORT": str(free_port())
                for kind in ("GRPC", "MEMBERSHIP", "HTTP")}
    server = ServerProcess("auth", bindir, pg, logs, extra={
        "TEMPORAL_AUTH_AUTHORIZER": "tower", "TEMPORAL_AUTH_CLAIM_MAPPER": "tower",
        "TOWER_AUTH_KEYS": str(logs / "jwks.json"), "TOWER_AUTH_AUDIENCE": AUDIENCE,
        "TOWER_AUTH_AGENTS": "refund",
        "TOWER_AUTH_QUEUES": QUEUE, "USE_INTERNAL_FRONTEND": "true", **internal})
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TEMPORAL_"))}
    (logs / "codec-keys").write_text(f"k1={new_key()}")
    env.update({"TOWER_CODEC_KEYS_FILE": str(logs / "codec-keys"),
                "TOWER_APPROVAL_SECRET": new_key(), "TOWER_PAYLOAD_DIR": str(logs / "payloads"),
                "TOWER_DB": str(logs / "tools.db"), "PYTHONUNBUFFERED": "1"})
    cluster = AuthCluster(server, logs, env, tokens)
    try:
        create_schemas(bindir, pg, logs / "schema.log")
        await until_serving(server.start().address)
        code, out = await cluster.tower("admin", "setup", "--wait", "120")
        assert code == 0, out
        yield cluster
    finally:
        server.stop()
        pg.stop()


@pytest.fixture(scope="module")
async def service_worker(auth_cluster: AuthCluster) -> AsyncIterator[WorkerProcess]:
    """`python worker.py` with the service token, polling before any test starts a run."""
    with LoopbackModelServer(replies=scripted_reply) as model:
        worker = WorkerProcess(auth_cluster.server.address, QUEUE,
                               Path(auth_cluster.env["TOWER_DB"]), model.base_url,
                               auth_cluster.logs / "worker.log")
        worker.env.update({**auth_cluster.env,
                           "TOWER_TEMPORAL_TOKEN_FILE": auth_cluster.token_file("service")})
        worker.start()
        try:
            await until_polled(await auth_cluster.client("service"))
            yield worker
        finally:
            worker.stop()


async def until_polled(client: Client, seconds: float = 300) -> None:
    for _ in range(int(seconds * 2)):
        described = await client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
            namespace=client.namespace, task_queue=TaskQueue(name=QUEUE),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW))
        if described.pollers:
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"no worker polls {QUEUE}")


async def refused(call: Awaitable[Any], what: str = "") -> None:
    """``call`` is refused by the server's authorization, not by anything else."""
    try:
        await call
    except RPCError as exc:
        assert exc.status == RPCStatusCode.PERMISSION_DENIED, (what, exc)
    else:
        raise AssertionError(f"the server accepted {what or 'the call'}")


async def absent(client: Client, run_id: str) -> None:
    with pytest.raises(RPCError) as info:
        await client.get_workflow_handle(run_id).describe()
    assert info.value.status == RPCStatusCode.NOT_FOUND, info.value


async def parked_refund(cluster: AuthCluster) -> WorkflowHandle[Any, Any]:
    """A refund started by the requester (`tower run` with its token), waiting at its gate:
    the handle is the service's, which observes it."""
    run_id = f"refund-{uuid.uuid4().hex[:6]}"
    code, out = await cluster.tower("requester", "run", "refund", "--input", REFUND,
                                    "--id", run_id, "--no-follow")
    assert code == 0, out
    handle = (await cluster.client("service")).get_workflow_handle(run_id)
    await wait_pending(handle, timeout=240)
    return handle


async def test_a_requester_may_start_only_the_deployments_agents_on_its_queues(
    auth_cluster: AuthCluster,
) -> None:
    requester = await auth_cluster.client("requester")
    service = await auth_cluster.client("service")
    request = {"message": "Please refund $5 on invoice INV-2004"}
    attempts: list[tuple[str, str, dict[str, Any]]] = [
        ("an agent not in the deployment's list", "support", {}),
        ("no agent at all", "NotAnAgent", {}),
        ("another queue", "refund", {"task_queue": "attacker-queue"}),
        ("a cron schedule", "refund", {"cron_schedule": "* * * * *"}),
        ("a signal with the start", "refund",
         {"start_signal": "decision", "start_signal_args": [{}]}),
    ]
    # (Eager execution is refused too, in deploy/temporal/server's policy test: the SDK
    # drops the request's flag when no worker of its own serves the queue.)
    for what, kind, options in attempts:
        run_id = f"forbidden-{uuid.uuid4().hex[:6]}"
        await refused(requester.start_workflow(
            kind, request, id=run_id, **{"task_queue": QUEUE, **options}), what)
        await absent(service, run_id)  # nothing was started
    # No token: no start, not even a read.
    anonymous = await auth_cluster.client(None)
    run_id = f"anonymous-{uuid.uuid4().hex[:6]}"
    await refused(anonymous.start_workflow("refund", request, id=run_id, task_queue=QUEUE))
    await refused(anonymous.count_workflows())
    await absent(service, run_id)
    # A token signed by a key the deployment does not trust, or by its own key for another
    # audience (or none): refused at the first call, the connection's system-info call
    # included.
    for role in ("forged", "elsewhere", "no-audience"):
        other = await auth_cluster.client(role)
        with pytest.raises(RuntimeError, match="PermissionDenied"):
            await other.start_workflow("refund", request, id=run_id, task_queue=QUEUE)
        await absent(service, run_id)


async def test_a_requesters_signal_update_reset_and_terminate_are_refused_by_the_server(
    auth_cluster: AuthCluster, service_worker: WorkerProcess,
) -> None:
    handle = await parked_refund(auth_cluster)
    pending = (await wait_pending(handle))["pending"]  # the gate's own activities done
    before = await recorded(handle)
    run_id = (await handle.describe()).run_id
    requester = await auth_cluster.client("requester")
    theirs = requester.get_workflow_handle(handle.id)
    # What the requester may do: read its run.
    assert (await theirs.describe()).workflow_type == "refund"
    # A genuinely signed decision does not help: the call itself is refused.
    genuine = decision(requester, handle.id, pending)
    await refused(theirs.signal("decision", genuine))
    await refused(theirs.execute_update("decide", genuine, result_type=dict))
    await refused(theirs.terminate("requester says so"))
    await refused(theirs.cancel())
    await refused(requester.workflow_service.reset_workflow_execution(
        reset_request(requester, handle.id, await first_task_completed(handle))))
    # A start that would terminate the parked run to take its id.
    await refused(requester.start_workflow(
        "refund", {"message": "Please refund $1 on invoice INV-2004"}, id=handle.id,
        task_queue=QUEUE, id_conflict_policy=WorkflowIDConflictPolicy.TERMINATE_EXISTING))
    # Nothing changed: same history, same pending request, same run, nothing paid.
    assert await recorded(handle) == before
    assert (await wait_pending(handle))["pending"] == pending
    assert (await handle.describe()).run_id == run_id
    assert refunds(Path(auth_cluster.env["TOWER_DB"])) == []
    # The approver's `tower approve` (approver token: signal and update) works, then the
    # worker (service token) pays, once.
    code, out = await auth_cluster.tower("approver", "approve", "--yes", handle.id,
                                         "--by", "alice",
                                         "--role", "manager")
    assert code == 0 and "status: DONE" in out, out
    assert refunds(Path(auth_cluster.env["TOWER_DB"])) == [("INV-2004", 120000)]


async def test_an_operator_may_reset_and_terminate_but_not_signal(
    auth_cluster: AuthCluster, service_worker: WorkerProcess,
) -> None:
    paid = refunds(Path(auth_cluster.env["TOWER_DB"]))
    handle = await parked_refund(auth_cluster)
    pending = (await wait_pending(handle))["pending"]
    run_id = (await handle.describe()).run_id
    operator = await auth_cluster.client("operator")
    ours = operator.get_workflow_handle(handle.id)
    await refused(ours.signal("decision", decision(operator, handle.id, pending)))
    await refused(ours.execute_update("decide", decision(operator, handle.id, pending),
                                      result_type=dict))
    await refused(operator.start_workflow("refund", {"message": "Please refund $5"},
                                          id=f"op-{uuid.uuid4().hex[:6]}", task_queue=QUEUE))
    # The operator's reset: a new run of the same workflow, back at its first step.
    reset = await operator.workflow_service.reset_workflow_execution(
        reset_request(operator, handle.id, await first_task_completed(handle)))
    assert reset.run_id and reset.run_id != run_id
    fresh = (await auth_cluster.client("service")).get_workflow_handle(handle.id)
    assert (await fresh.describe()).run_id == reset.run_id
    await wait_pending(fresh, timeout=240)
    await ours.terminate("operator: not wanted")
    assert (await fresh.describe()).status == WorkflowExecutionStatus.TERMINATED
    assert refunds(Path(auth_cluster.env["TOWER_DB"])) == paid  # nothing paid for it


async def first_task_completed(handle: WorkflowHandle[Any, Any]) -> int:
    history = await handle.fetch_history()
    return next(e.event_id for e in history.events
                if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)


def reset_request(client: Client, run: str, event_id: int) -> ResetWorkflowExecutionRequest:
    return ResetWorkflowExecutionRequest(
        namespace=client.namespace, workflow_execution=WorkflowExecution(workflow_id=run),
        reason="test", workflow_task_finish_event_id=event_id, request_id=uuid.uuid4().hex)


def delete_request(client: Client, run: str) -> DeleteWorkflowExecutionRequest:
    return DeleteWorkflowExecutionRequest(namespace=client.namespace,
                                          workflow_execution=WorkflowExecution(workflow_id=run))


def batch_terminate(client: Client, run: str) -> StartBatchOperationRequest:
    return StartBatchOperationRequest(
        namespace=client.namespace, job_id=uuid.uuid4().hex, reason="test",
        visibility_query=f"WorkflowId = '{run}'",
        termination_operation=BatchOperationTermination(identity="test"))


def namespace_change(client: Client, who: str) -> UpdateNamespaceRequest:
    return UpdateNamespaceRequest(namespace=client.namespace,
                                  update_info=UpdateNamespaceInfo(description=f"by {who}"))


async def test_only_operators_delete_or_batch_terminate_and_only_admins_change_namespaces(
    auth_cluster: AuthCluster, service_worker: WorkerProcess,
) -> None:
    """Approvers' and the inbox's tokens signal and update only: they cannot erase a run's
    history (delete), terminate runs wholesale (batch), reset or terminate one, or change
    the namespace; nor can the worker's or a requester's. An operator can delete and run
    batches; only the cluster's admin changes a namespace."""
    handle = await parked_refund(auth_cluster)
    await wait_pending(handle)
    before = await recorded(handle)
    first = await first_task_completed(handle)
    for role in ("approver", "inbox", "service", "requester"):
        them = await auth_cluster.client(role)
        calls = them.workflow_service
        await refused(calls.delete_workflow_execution(delete_request(them, handle.id)),
                      f"{role}: delete")
        await refused(calls.start_batch_operation(batch_terminate(them, handle.id)),
                      f"{role}: batch terminate")
        await refused(calls.reset_workflow_execution(reset_request(them, handle.id, first)),
                      f"{role}: reset")
        await refused(them.get_workflow_handle(handle.id).terminate(role), f"{role}: terminate")
        await refused(calls.update_namespace(namespace_change(them, role)),
                      f"{role}: namespace change")
    operator = await auth_cluster.client("operator")
    await refused(operator.workflow_service.update_namespace(
        namespace_change(operator, "operator")), "operator: namespace change")
    # Nothing changed: the run waits with the same history.
    assert await recorded(handle) == before
    assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
    # The operator's batch terminates it (on the server's system worker), then deletes it.
    await operator.workflow_service.start_batch_operation(batch_terminate(operator, handle.id))
    async with asyncio.timeout(120):
        while (await handle.describe()).status != WorkflowExecutionStatus.TERMINATED:
            await asyncio.sleep(0.5)
    await operator.workflow_service.delete_workflow_execution(
        delete_request(operator, handle.id))
    async with asyncio.timeout(120):
        while True:
            try:
                await handle.describe()
            except RPCError as exc:
                assert exc.status == RPCStatusCode.NOT_FOUND, exc
                break
            await asyncio.sleep(0.5)
    admin = await auth_cluster.client("admin")
    await admin.workflow_service.update_namespace(namespace_change(admin, "admin"))

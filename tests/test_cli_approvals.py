"""`tower run`, `tower pending`, `tower approve` and `tower reject` as a user runs them."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
from pathlib import Path

from conftest import WorkerFactory
from gatekit import decision, forged_key, make_shop, refunds, schema, wait_pending
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.testing import WorkflowEnvironment
from towercli import example_project, tower_cli

from tower.activities.model import ModelSettings
from tower.cli.agents import scripted_reply
from tower.cli.devserver import temporal_binary
from tower.cli.trust_files import dev_trust
from tower.client.keys import new_key
from tower.contract import search
from tower.testing.model_server import Fault, LoopbackModelServer
from worker import build_worker


async def tower(env: WorkflowEnvironment, cwd: Path, *args: str,
                **extra: str) -> tuple[int, str, str]:
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("OPENAI_", "TEMPORAL_", "TOWER_"))}
    # The approvers' keys and the deployment's trust dir: the session's (tests/conftest.py).
    environ.update({"TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
                    "TOWER_CONFIG_DIR": os.environ["TOWER_CONFIG_DIR"],
                    "TOWER_TRUST_DIR": os.environ["TOWER_TRUST_DIR"],
                    "TOWER_TASK_QUEUES": os.environ.get("TOWER_TASK_QUEUES", ""), **extra})
    return await tower_cli(list(args), env=environ, cwd=example_project(cwd), timeout=90)


async def test_refund_paused_listed_refused_then_approved_from_the_cli(
    env: WorkflowEnvironment, task_queue: str, db_path: Path, tmp_path: Path,
    scripted_worker: WorkerFactory,
) -> None:
    run = f"refund-cli-{task_queue}"
    request = '{"message": "Please refund $1,200 on invoice INV-2004"}'
    async with scripted_worker():
        code, out, err = await tower(env, tmp_path, "run", "refund", "--input", request,
                                     "--id", run, "--task-queue", task_queue)
        assert code == 0, err
        assert "status: AWAITING_APPROVAL" in out
        assert "waiting at gate refund_review (before issue_refund) for role manager" in out
        assert f"decide with: tower approve {run} --by NAME" in out

        code, out, _ = await tower(env, tmp_path, "pending")
        head = next(line for line in out.splitlines() if line.startswith(run))
        assert code == 0 and "agent refund" in head and "role manager" in head
        assert "  gate refund_review (before issue_refund)" in out
        assert "    amount_cents: 120000  ($1,200.00)" in out and "editable: amount_cents" in out

        # A clerk may not approve; the run says why and nothing changes.
        code, out, _ = await tower(env, tmp_path, "approve", "--yes",
                                   run, "--by", "carol", "--role",
                                   "clerk")
        assert code == 1
        assert "refused: role 'clerk' may not decide gate 'refund_review'" in out
        assert "refusal code: not_authorized" in out
        # A name that is a path is refused in one line before anything is sent.
        code, out, err = await tower(env, tmp_path, "approve", run, "--by", "../../etc/passwd")
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
        assert "invalid name '../../etc/passwd'" in err and "validation error" not in err
        # Nobody can sign without a key of their own; a key that claims alice's key id
        # is not alice's key.
        code, _, err = await tower(env, tmp_path, "approve", "--yes", run, "--by", "eve")
        assert code == 2 and "no signing key for 'eve'" in err
        mallory = tmp_path / "mallory"
        (mallory / "keys").mkdir(parents=True)
        (mallory / "keys" / "alice.jwk").write_text(json.dumps(forged_key("alice")))
        (mallory / "keys" / "alice.jwk").chmod(0o600)
        code, out, _ = await tower(env, tmp_path, "approve", "--yes", run, "--by", "alice",
                                   TOWER_CONFIG_DIR=str(mallory))
        assert code == 1 and "refused: invalid signature" in out
        assert "refusal code: bad_signature" in out

        code, out, err = await tower(env, tmp_path, "approve", "--yes",
                                     run, "--by", "alice", "--role",
                                     "manager", "--set", "amount_cents=100000",
                                     "--note", "partial refund", "--decision-id", "d-cli-1")
        assert code == 0, err
        assert "signed with alice's key alice-" in out
        # --yes signs without asking, never unseen: the whole request is printed first.
        assert out.index("You are about to approve this request") < out.index("signed with")
        # The digest shown is the one the decision names.
        shown = re.search(r"^  digest (sha256:[0-9a-f]{64})$", out, re.M)
        assert shown and f"proposal {shown.group(1)}" in out, out
        assert "    amount_cents: 120000  ($1,200.00)" in out.splitlines()
        assert "outcome: gate refund_review approved" in out
        assert re.search(r"issue_refund → confirm", out) and "status: DONE" in out
        assert "Your refund of $1,000.00 has been issued" in out

        code, out, err = await tower(env, tmp_path, "approve", "--yes",
                                     run, "--by", "alice", "--role",
                                     "manager", "--decision-id", "d-cli-1")
        assert code == 2 and "is closed (COMPLETED)" in err, (out, err)
        assert "gate refund_review, was approved by alice" in err
    assert refunds(db_path) == [("INV-2004", 100000)]


async def test_an_approval_sent_before_the_request_opens_waits_for_it(
    env: WorkflowEnvironment, task_queue: str, db_path: Path, tmp_path: Path,
    scripted_worker: WorkerFactory,
) -> None:
    # A run just started, or forked back to its gate, replays and attests before its request
    # shows: an approval sent in that window waits for the request, and pays once.
    run = f"refund-early-{task_queue}"
    request = '{"message": "Please refund $1,200 on invoice INV-2004"}'
    with LoopbackModelServer(replies=scripted_reply) as model:
        model.inject(Fault("slow", seconds=6))  # the run's first model call: no request yet
        async with scripted_worker(models=ModelSettings(api_key="test",
                                                        base_url=model.base_url)):
            code, _, err = await tower(env, tmp_path, "run", "refund", "--input", request,
                                       "--id", run, "--task-queue", task_queue, "--no-follow")
            assert code == 0, err
            code, out, err = await tower(env, tmp_path, "approve", "--yes", run, "--by",
                                         "alice", "--role", "manager")
    assert code == 0, (out, err)
    assert f"run {run} has no request open yet" in out + err
    assert "outcome: gate refund_review approved" in out
    assert refunds(db_path) == [("INV-2004", 120000)]


async def test_migration_rejected_from_the_cli_changes_nothing(
    env: WorkflowEnvironment, task_queue: str, db_path: Path, tmp_path: Path,
    scripted_worker: WorkerFactory,
) -> None:
    shop = make_shop(db_path)
    before = schema(shop)
    run = f"migration-cli-{task_queue}"
    request = '{"database": "shop", "script": "DROP TABLE legacy_notes;"}'
    async with scripted_worker():
        code, out, err = await tower(env, tmp_path, "run", "migration", "--input", request,
                                     "--id", run, "--task-queue", task_queue)
        assert code == 0 and "gate dba_review" in out, err
        # A signal from someone without the role is refused by the run and kept in its
        # audit trail.
        code, out, err = await tower(env, tmp_path, "approve", "--yes",
                                     run, "--by", "carol", "--signal")
        assert code == 0 and "sent as a signal" in out, err
        handle = env.client.get_workflow_handle(run)
        async with asyncio.timeout(30):
            while not (await handle.query("approvals", result_type=dict))["refused"]:
                await asyncio.sleep(0.1)
        code, out, err = await tower(env, tmp_path, "reject", run, "--by", "dana", "--note",
                                     "notes are still read by billing")
        assert code == 0, err
        assert "outcome: gate dba_review rejected" in out and "status: DONE" in out
    assert schema(shop) == before


async def test_unsigned_only_when_the_deployment_allows_it(
    env: WorkflowEnvironment, task_queue: str, db_path: Path, tmp_path: Path,
    scripted_worker: WorkerFactory,
) -> None:
    request = '{"message": "Please refund $900 on invoice INV-2004"}'
    # The session's deployment requires signatures: an unsigned decision is refused.
    run = f"refund-signed-{task_queue}"
    async with build_worker(env.client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings()):
        code, out, err = await tower(env, tmp_path, "run", "refund", "--input", request,
                                     "--id", run, "--task-queue", task_queue)
        assert code == 0 and "AWAITING_APPROVAL" in out and "UNSIGNED" not in out, err
        code, out, _ = await tower(env, tmp_path, "approve", "--yes",
                                   run, "--by", "dev", "--unsigned")
        assert code == 1 and "refused: unsigned decision refused" in out
        await env.client.get_workflow_handle(run).terminate("test over")
    # A development deployment that allows them: the run says so everywhere.
    dev = tmp_path / "dev-trust"
    dev_trust(dev, env.client.namespace, approvers={}, unsigned_allowed=True)
    run = f"refund-unsigned-{task_queue}"
    async with build_worker(env.client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings(), trust_dir=dev):
        code, out, err = await tower(env, tmp_path, "run", "refund", "--input", request,
                                     "--id", run, "--task-queue", task_queue)
        assert code == 0 and "AWAITING_APPROVAL" in out, err
        handle = env.client.get_workflow_handle(run)
        await wait_pending(handle)
        described = await handle.describe()
        assert described.typed_search_attributes.get(search.UNSIGNED_DECISIONS) is True
        assert (await handle.query("state", result_type=dict))["unsigned_decisions"] is True
        meta = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
        assert "UNSIGNED decisions accepted" in meta.current_details
        code, out, err = await tower(env, tmp_path, "approve", "--yes", run, "--by", "dev",
                                     "--unsigned")
        assert code == 0, err
        assert "UNSIGNED (accepted only where" in out and "status: DONE" in out
        assert "approved by dev (manager, UNSIGNED)" in out
    assert refunds(db_path) == [("INV-2004", 90000)]


async def test_a_printed_decision_sent_by_the_temporal_cli_pays_once(
    env: WorkflowEnvironment, task_queue: str, db_path: Path, tmp_path: Path,
    scripted_worker: WorkerFactory,
) -> None:
    """`tower approve --print-token` signs and sends nothing; the real `temporal` CLI sends
    the printed decision as the `decide` update: the refund is paid once. The approver is
    enrolled after the run started and nobody sends `refresh_trust`: the run reads its
    roster again by itself. A decision under a key id no roster names is refused with its
    code, and nothing moves. The same token sent again is a duplicate that pays nothing."""
    trust, config = tmp_path / "trust", tmp_path / "approvers"
    dev_trust(trust, env.client.namespace, config=config, approvers={"carol": ["clerk"]})
    own = {"TOWER_TRUST_DIR": str(trust), "TOWER_CONFIG_DIR": str(config)}
    run = f"refund-token-{task_queue}"
    request = '{"message": "Please refund $1,200 on invoice INV-2004"}'
    async with scripted_worker(trust_dir=trust):
        code, _, err = await tower(env, tmp_path, "run", "refund", "--input", request,
                                   "--id", run, "--task-queue", task_queue, "--no-follow",
                                   **own)
        assert code == 0, err
        handle = env.client.get_workflow_handle(run)
        parked = await wait_pending(handle)
        code, out, err = await tower(env, tmp_path, "keys", "enrol", "erin", "--role",
                                     "manager", **own)
        assert code == 0, err
        code, token, err = await tower(env, tmp_path, "approve", run, "--by", "erin",
                                       "--yes", "--print-token", **own)
        assert code == 0, err
        assert "amount_cents: 120000" in err and "decision d-" in err  # shown, on stderr
        assert list(json.loads(token)) == ["token"] and token.count("\n") == 1, token
        assert refunds(db_path) == []  # nothing was sent

        def send(message: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [str(temporal_binary()), "workflow", "update", "execute", "--workflow-id",
                 run, "--name", "decide", "--input", message, "--address",
                 env.client.service_client.config.target_host, "--namespace",
                 env.client.namespace, "--output", "json"],
                capture_output=True, text=True, timeout=60)

        forged = decision(env.client, run, parked["pending"], approver="erin",
                          key=new_key("mallory-1"))
        refused = await asyncio.to_thread(send, json.dumps(forged))
        assert refused.returncode != 0 and "unknown key id 'mallory-1'" in refused.stderr, \
            refused
        info = await handle.query("approvals", result_type=dict)
        assert [r["code"] for r in info["refused"]] == ["unknown_key"], info["refused"]
        assert info["pending"] == parked["pending"] and refunds(db_path) == []
        assert info["refreshed_at"] != parked["refreshed_at"]  # read again, by itself

        sent = await asyncio.to_thread(send, token.strip())
        assert sent.returncode == 0, sent
        outcome = json.loads(sent.stdout)["result"]
        assert (outcome["result"], outcome["duplicate"]) == ("approved", False), outcome
        result = await handle.result()
        again = await asyncio.to_thread(send, token.strip())  # nothing to decide any more
        assert again.returncode != 0 and "already completed" in again.stderr, again
        history = await handle.fetch_history()
    signals = [e for e in history.events
               if e.HasField("workflow_execution_signaled_event_attributes")]
    assert signals == []  # no refresh_trust, no decision signal: the run asked itself
    assert result["status"] == "DONE" and result["refund_id"]
    assert result["approvals"][0]["decision"]["approver"] == "erin"
    assert refunds(db_path) == [("INV-2004", 120000)]

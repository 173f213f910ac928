"""Record the replay fixtures: `python -m tests.record_histories [--out tests/histories]`.

Starts a throw-away dev server (nothing downloaded, in memory), a worker on the
offline scripted model and a fresh tools database, runs every demo input of
``tower.cli.demo.requests()`` (every agent that has one) and the gated scenarios below,
and writes each run's history as ``ID.json`` (the workflow id, which replay reads
back from the name) with an index in ``README.md``. A demo run that stops at a
gate is recorded as it stands, parked: a history of a run still in flight.
Re-run it whenever an agent or a demo input is added; `pytest
tests/test_histories.py` then replays them all.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import sqlite3
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from tower.activities.model import ModelSettings
from tower.cli.agents import scripted_reply
from tower.cli.devserver import temporal_binary
from tower.cli.live import follow
from tower.cli.trust_files import dev_trust
from tower.client._decisions import make_decision
from tower.contract import search
from tower.contract.decisions import GateRecord, Verdict
from tower.testing import assert_replays
from tower.testing.model_server import LoopbackModelServer
from worker import build_worker
from workflows.order import OrderRequest
from workflows.registry import AGENTS

DEFAULT_OUT = Path("tests") / "histories"
QUEUE = "record-histories"
APPROVER = {"manager": "alice", "dba": "dana"}
BIG_REFUND = "Please refund $1,200 on invoice INV-2004"
SHOP = """CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, fax TEXT);
INSERT INTO customers (name, fax) VALUES ('Ada', '555-0100'), ('Grace', NULL);"""


@dataclass(frozen=True)
class Gated:
    """A run of an agent outside the demo, and what a reviewer answers at its gate (None:
    leave a gated run parked)."""

    id: str
    agent: str
    request: dict[str, Any]
    what: str
    verdict: Verdict | None = None
    edits: dict[str, Any] = field(default_factory=dict)
    role: str = "manager"


GATED = [
    Gated("refund-approved", "refund", {"message": BIG_REFUND},
          "over the limit: the gate parks the run, a manager lowers and approves it, "
          "the refund is issued once", Verdict.APPROVE, {"amount_cents": 100_000}),
    Gated("refund-rejected", "refund", {"message": BIG_REFUND},
          "over the limit: the manager rejects, nothing is refunded", Verdict.REJECT),
    Gated("refund-parked", "refund", {"message": BIG_REFUND},
          "over the limit and still waiting for a decision: a run in flight"),
    Gated("migration-approved", "migration",
          {"database": "shop", "script": "ALTER TABLE customers DROP COLUMN fax;"},
          "a destructive migration: a DBA approves, then it is applied", Verdict.APPROVE,
          role="dba"),
    # No gate, but no demo input either: a parent that runs child agents.
    Gated("fanout-1", "fanout", {"companies": ["Acme", "Globex"]},
          "map-reduce: one child company agent per item, results merged"),
]


async def record_gated(client: Client, gated: Gated, out: Path, config: Path,
                       queue: str = QUEUE, prefix: str = "") -> str:
    """Run ``gated`` (as ``PREFIX + its id``) on ``queue`` and write its history to ``out``."""
    request = AGENTS[gated.agent].Input.model_validate(gated.request)
    run = prefix + gated.id
    handle = await client.start_workflow(gated.agent, request, id=run, task_queue=queue)
    status = await asyncio.wait_for(follow(handle, out=io.StringIO()), timeout=120)
    if status == "AWAITING_APPROVAL" and gated.verdict is not None:
        pending = (await handle.query("approvals", result_type=dict))["pending"]
        decision, _ = make_decision(
            tenant=client.namespace, run=run, pending=GateRecord.model_validate(pending),
            verdict=gated.verdict, approver=APPROVER[gated.role],
            role=gated.role, edits=gated.edits, decision_id=f"d-{run}", config=config)
        await handle.execute_update("decide", decision, result_type=dict)
        status = await asyncio.wait_for(_finished(handle), timeout=120)
    history = await handle.fetch_history()
    (out / f"{run}.json").write_text(history.to_json() + "\n")
    return status


CHAT_TURNS = ["hello there", "what is my account status? ACC-1001", "and my invoice INV-2001?",
              "search docs login error", "thanks", "one more thing", "what did I ask first?",
              "bye for now"]


async def record_chat(client: Client, out: Path, workflow_id: str = "chat-1") -> str:
    """A thread of several turns (updates) that continues-as-new once its history passes 40
    events; every run of the chain is written, as ``WORKFLOW_ID@RUN_ID.json``."""
    from workflows.chat import ChatAgent, ChatConfig, ChatInput, UserMessage

    request = ChatInput(config=ChatConfig.model_validate({"continue_as_new_after": 40}))
    handle = await client.start_workflow(ChatAgent.run, request, id=workflow_id,
                                         task_queue=QUEUE)
    latest = client.get_workflow_handle(workflow_id)
    for text in CHAT_TURNS:
        await latest.execute_update("send", UserMessage(text=text), result_type=dict)
    await latest.execute_update("close", result_type=str)
    status = await asyncio.wait_for(_finished(latest), timeout=120)
    run_id: str | None = handle.result_run_id
    while run_id:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        (out / f"{workflow_id}@{run_id}.json").write_text(history.to_json() + "\n")
        last = history.events[-1].workflow_execution_continued_as_new_event_attributes
        run_id = last.new_execution_run_id or None
    return status


FALLBACK_ORDER = "1 x WIDGET-1 to 4 Oak Lane, Bristol, GB"


async def record_fallback(client: Client, db_path: Path, out: Path) -> str:
    """The order agent with its primary model down: every model call goes through the real
    openai SDK to a loopback server that answers 500 for "primary", so "backup" answers and
    the transitions say so. Its own worker and queue, since its models differ."""
    with LoopbackModelServer(replies=scripted_reply) as server:
        server.set_down("primary")
        models = ModelSettings(api_key="loopback", base_url=server.base_url,
                               models=["primary", "backup"], timeout_seconds=10)
        queue = f"{QUEUE}-fallback"
        async with build_worker(client, task_queue=queue, db_path=db_path, models=models):
            handle = await client.start_workflow(
                "order", OrderRequest(text=FALLBACK_ORDER), id="order-fallback",
                task_queue=queue)
            status = await asyncio.wait_for(_finished(handle), timeout=120)
            history = await handle.fetch_history()
    (out / "order-fallback.json").write_text(history.to_json() + "\n")
    return status


async def _finished(handle: Any) -> str:
    while True:
        status: str = await handle.query("status", result_type=str)
        if status in ("DONE", "FAILED"):
            return status
        await asyncio.sleep(0.1)


async def record_one(
    client: Client, workflow_id: str, agent: str, request: BaseModel, out: Path,
    queue: str = QUEUE, **start: Any,
) -> str:
    """One run of ``agent`` recorded in ``out``; ``start`` goes to ``start_workflow``."""
    handle = await client.start_workflow(agent, request, id=workflow_id, task_queue=queue,
                                         **start)
    status = await asyncio.wait_for(follow(handle, out=io.StringIO()), timeout=120)
    history = await handle.fetch_history()
    (out / f"{workflow_id}.json").write_text(history.to_json() + "\n")
    return status


async def record(out: Path, runs: Sequence[tuple[str, BaseModel, str]]) -> list[str]:
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.json"):  # the folder's own files only; subfolders are kept
        old.unlink()
    # Plain pydantic payloads, never external storage: a fixture must carry all its data.
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(), data_converter=pydantic_data_converter,
        search_attributes=search.ALL, dev_server_log_level="error")
    rows: list[str] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            # Throw-away approver keys; only their public halves reach the histories.
            config, trust = Path(tmp) / "approvers", Path(tmp) / "trust"
            dev_trust(trust, env.client.namespace, config=config)
            worker = build_worker(env.client, task_queue=QUEUE, db_path=Path(tmp) / "tools.db",
                                  models=ModelSettings(), trust_dir=trust)
            async with worker:
                counts: dict[str, int] = {}
                for agent, request, what in runs:
                    counts[agent] = counts.get(agent, 0) + 1
                    workflow_id = f"{agent}-{counts[agent]}"
                    status = await record_one(env.client, workflow_id, agent, request, out)
                    print(f"recorded {workflow_id}.json: {status} ({what})", flush=True)
                    rows.append(f"| `{workflow_id}.json` | {agent} | {status} | {what} |")
                _make_shop(Path(tmp) / "databases" / "shop.sqlite")
                for gated in GATED:
                    status = await record_gated(env.client, gated, out, config)
                    print(f"recorded {gated.id}.json: {status} ({gated.what})", flush=True)
                    rows.append(f"| `{gated.id}.json` | {gated.agent} | {status} | "
                                f"{gated.what} |")
                status = await record_fallback(env.client, Path(tmp) / "tools.db", out)
                what = "primary model down (HTTP 500): the backup model answers every call"
                print(f"recorded order-fallback.json: {status} ({what})", flush=True)
                rows.append(f"| `order-fallback.json` | order | {status} | {what} |")
                status = await record_chat(env.client, out)
                what = ("a thread of updates that continues-as-new, carrying its state over; its "
                        "window is one ref in the message store, model calls are local "
                        "activities")
                print(f"recorded chat-1@*.json: {status} ({what})", flush=True)
                rows.append(f"| `chat-1@*.json` | chat | {status} | {what} |")
    finally:
        await env.shutdown()
    index = [
        "# Recorded histories", "",
        "Real runs on the dev server with the offline scripted model, regenerated by",
        "`python -m tests.record_histories`. `tests/test_histories.py` replays every",
        "file here against the current code; a change that breaks one breaks CI: change an",
        "agent with the steps of docs/versioning.md, never by recording these again while",
        "runs like them may be open.", "",
        "| file | agent | status when recorded | what it shows |", "|---|---|---|---|", *rows,
    ]
    (out / "README.md").write_text("\n".join(index) + "\n")
    return rows


def _make_shop(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)  # the tools' database may have made the example one
    with sqlite3.connect(path) as db:
        db.executescript(SHOP)


async def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    from tower.cli.demo import requests  # every agent's demo inputs, kept in one place

    await record(args.out, requests())
    # A fixture that fails the moment it is written is useless: each that does is named.
    await assert_replays(args.out, workflows=list(AGENTS.values()))
    return 0


if __name__ == "__main__":
    code = asyncio.run(main())
    sys.stdout.flush()
    sys.exit(code)

"""Record gated runs for replay: `python -m tests.record_gates [--out tests/histories/gates]`.

Each run here gets human decisions (updates and signals, refused and accepted), which
``tests.record_histories`` (demo inputs only) cannot give, so the replay tests also
cover waiting at a gate, a refused signal, an approval with an edit, a rejection and a
stale re-check. Decisions are signed with throw-away approver keys; only their public
halves (the roster the runs load) are in the histories.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from activities.tools.migrations import EXAMPLE_SHOP
from tower.activities.model import ModelSettings
from tower.cli.devserver import temporal_binary
from tower.cli.trust_files import dev_trust
from tower.client._decisions import make_decision
from tower.contract import search
from tower.contract.decisions import GateRecord, Verdict
from tower.testing import assert_replays
from worker import build_worker
from workflows.migration import MigrationRequest
from workflows.refund import RefundRequest
from workflows.registry import AGENTS

DEFAULT_OUT = Path("tests") / "histories" / "gates"
QUEUE = "record-gates"
APPROVER = {"manager": "alice", "dba": "dana", "clerk": "carol"}
DROP = "ALTER TABLE customers DROP COLUMN fax;\nDROP TABLE legacy_notes;"


async def _pending(client: Client, run: str) -> dict[str, Any]:
    handle = client.get_workflow_handle(run)
    async with asyncio.timeout(60):
        while True:
            info: dict[str, Any] = await handle.query("approvals", result_type=dict)
            if info["pending"]:
                return dict(info["pending"])
            await asyncio.sleep(0.1)


async def _decide(client: Client, run: str, verdict: Verdict, role: str, *, config: Path,
                  via: str = "update", **kw: Any) -> None:
    p = await _pending(client, run)
    decision, _ = make_decision(
        tenant=client.namespace, run=run, pending=GateRecord.model_validate(p), verdict=verdict,
        approver=APPROVER[role], role=role, config=config, **kw)
    handle = client.get_workflow_handle(run)
    if via == "signal":
        await handle.signal("decision", decision)
    else:
        await handle.execute_update("decide", decision)


async def _start(client: Client, agent: str, run: str, request: Any) -> Any:
    return await client.start_workflow(agent, request, id=run, task_queue=QUEUE)


async def record(out: Path) -> list[str]:
    out.mkdir(parents=True, exist_ok=True)
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(), data_converter=pydantic_data_converter,
        search_attributes=search.ALL, dev_server_log_level="error")
    client, written = env.client, []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            shop = Path(tmp) / "databases" / "shop.sqlite"
            shop.parent.mkdir()
            with sqlite3.connect(shop) as db:
                db.executescript(EXAMPLE_SHOP)
            config = Path(tmp) / "approvers"
            dev_trust(Path(tmp) / "trust", client.namespace, config=config)
            async with build_worker(client, task_queue=QUEUE, db_path=Path(tmp) / "tools.db",
                                    models=ModelSettings(), trust_dir=Path(tmp) / "trust"):
                big = RefundRequest(message="Please refund $1,200 on invoice INV-2004")
                h1 = await _start(client, "refund", "refund-gated-1", big)
                await _decide(client, h1.id, Verdict.APPROVE, "clerk", via="signal",
                              config=config)  # refused: a clerk may not decide
                await _decide(client, h1.id, Verdict.APPROVE, "manager", config=config,
                              edits={"amount_cents": 100000}, note="partial")
                h2 = await _start(client, "refund", "refund-gated-2", big)
                await _decide(client, h2.id, Verdict.REJECT, "manager", via="signal",
                              config=config, note="not this quarter")
                h3 = await _start(client, "migration", "migration-gated-1",
                                  MigrationRequest(database="shop", script=DROP))
                await _pending(client, h3.id)
                with sqlite3.connect(shop) as db:  # the schema moves while the DBA thinks
                    db.execute("CREATE TABLE audit (id INTEGER PRIMARY KEY)")
                await _decide(client, h3.id, Verdict.APPROVE, "dba", config=config)  # stale
                await _decide(client, h3.id, Verdict.APPROVE, "dba", config=config)
                for handle in (h1, h2, h3):
                    await handle.result()
                    history = await handle.fetch_history()
                    (out / f"{handle.id}.json").write_text(history.to_json() + "\n")
                    written.append(handle.id)
    finally:
        await env.shutdown()
    return written


async def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    for name in await record(args.out):
        print(f"recorded {args.out / name}.json")
    # A fixture that fails the moment it is written is useless: each that does is named.
    await assert_replays(args.out, workflows=list(AGENTS.values()))
    return 0


if __name__ == "__main__":
    code = asyncio.run(main())
    sys.stdout.flush()
    sys.exit(code)

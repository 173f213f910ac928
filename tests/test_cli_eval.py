"""`tower eval` as a user runs it: a candidate project (the example with its billing desk
broken), recorded runs read from the real server with --query, the real namespace and
the real tools' data checked untouched afterwards."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from temporalio.client import Client
from test_cli import cli_env
from towercli import tower_cli

from workflows.support import SupportRequest

EXAMPLE = Path(__file__).parent.parent


def broken_project(folder: Path) -> Path:
    """The example project with one injected bug: the billing desk's node fails."""
    for part in ("workflows", "activities"):
        shutil.copytree(EXAMPLE / part, folder / part,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(EXAMPLE / "worker.py", folder / "worker.py")
    support = folder / "workflows" / "support.py"
    text = support.read_text()
    assert '.node("billing", handle,' in text
    text = text.replace('.node("billing", handle,', '.node("billing", billing_down,')
    text = text.replace("def by_category(", (
        "async def billing_down(ctx: NodeContext, state: SupportState) -> dict[str, object]:\n"
        "    raise NodeFailed(\"billing: the invoice service is unreachable\")\n\n\n"
        "def by_category("))
    support.write_text(text)
    return folder


async def namespace_snapshot(client: Client) -> list[tuple[Any, ...]]:
    """Every run of the namespace: id, run id, status, history length."""
    runs = [(r.id, r.run_id, r.status, r.history_length)
            async for r in client.list_workflows("")]
    return sorted(runs, key=repr)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_eval_query_catches_a_regression_and_touches_nothing_real(
    client: Client, scripted_worker: Any, task_queue: str, db_path: Path, tmp_path: Path,
) -> None:
    messages = {"billing": "I was charged twice on invoice INV-2001",
                "tech": "Login fails with error 500 since this morning"}
    async with scripted_worker():
        for name, text in messages.items():
            handle = await client.start_workflow(
                "support", SupportRequest(message=text), id=f"evalq-{name}-{task_queue}",
                task_queue=task_queue, result_type=dict)
            await handle.result()
    query = f"TaskQueue = '{task_queue}' AND ExecutionStatus = 'Completed'"
    while (await client.count_workflows(query)).count != 2:  # visibility catches up
        await asyncio.sleep(0.1)
    before, data = await namespace_snapshot(client), digest(db_path)
    project = broken_project(tmp_path / "candidate")
    env = cli_env(client.service_client.config.target_host)
    code, out, err = await tower_cli(
        ["--project", str(project), "eval", "--query", query, "--data", str(db_path),
         "--fail-on", "regressed", "--report", str(tmp_path / "report")],
        env=env, cwd=tmp_path, timeout=240)
    assert code == 1, (out, err)
    assert f"evalq-billing-{task_queue} (support): regressed - status: DONE at DONE -> " \
           "FAILED" in err
    assert f"evalq-tech-{task_queue} (support): same" in err
    assert "2 runs: 1 same, 0 changed, 1 regressed" in out and "real data unchanged" in out
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["counts"] == {"same": 1, "changed": 0, "regressed": 1}
    assert report["moved"] == {"support": {"billing->DONE": -1, "billing->FAILED": 1}}
    svg = (tmp_path / "report" / "graph-support.svg").read_text()
    assert 'stroke="#c62828" stroke-width="3.2"' in svg and "-1 run" in svg
    assert "regressed" in (tmp_path / "report" / "report.md").read_text()
    # Nothing real moved: the namespace's runs and the tools' data are as they were.
    assert await namespace_snapshot(client) == before
    assert digest(db_path) == data

    # The same eval as a baseline: against itself nothing is a regression any more.
    code, out, err = await tower_cli(
        ["--project", str(project), "eval", "--query", query, "--baseline",
         str(tmp_path / "report"), "--fail-on", "regressed", "--json"],
        env=env, cwd=tmp_path, timeout=240)
    assert code == 0, (out, err)
    assert json.loads(out)["counts"] == {"same": 2, "changed": 0, "regressed": 0}

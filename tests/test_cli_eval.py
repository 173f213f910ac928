"""`tower eval` as a user runs it: a candidate project (the example with its billing desk
broken), recorded runs read from the real server with --query, the real namespace and
the real tools' data checked untouched afterwards."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from test_cli import cli_env
from towercli import tower_cli

from workflows.support import SupportRequest

pytestmark = pytest.mark.long

EXAMPLE = Path(__file__).parent.parent
HISTORIES = EXAMPLE / "tests" / "histories"


def example_project(folder: Path) -> Path:
    """A copy of the example project (its agents, tools and worker)."""
    for part in ("workflows", "activities"):
        shutil.copytree(EXAMPLE / part, folder / part,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(EXAMPLE / "worker.py", folder / "worker.py")
    return folder


def broken_project(folder: Path) -> Path:
    """The example project with one injected bug: the billing desk's node fails."""
    example_project(folder)
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
    assert 'stroke="#c62828" stroke-width="3.2"' in svg and "-1 visit" in svg
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


async def record_today(client: Client, queue: str, live: Path, out: Path) -> list[str]:
    """14 runs recorded on today's code, as a deployment makes them: every demo input,
    started as `tower demo` and `tower run` start runs (with their first move's search
    attributes, so the run upserts none at that move), and the gated runs of
    tests/record_histories.py (a refund approved and paid, one rejected, one parked, a
    migration approved and applied, a fan-out), on the project's own tools' data, which
    keeps what they did (the refund paid, the column dropped)."""
    from record_histories import GATED, record_gated, record_one

    from tower.activities.model import ModelSettings
    from tower.cli.demo import requests
    from tower.contract.search import start_attributes
    from worker import build_worker
    from workflows.registry import AGENTS

    out.mkdir()
    config = Path(os.environ["TOWER_CONFIG_DIR"])  # the approvers' keys (conftest's trust)
    statuses = []
    async with build_worker(client, task_queue=queue, db_path=live, models=ModelSettings()):
        for i, (agent, request, _) in enumerate(requests(), 1):
            statuses.append(await record_one(
                client, f"today-{agent}-{i}-{queue}", agent, request, out, queue,
                search_attributes=start_attributes(AGENTS[agent].machine)))
        for gated in GATED:
            statuses.append(await record_gated(client, gated, out, config, queue=queue,
                                               prefix=f"today-{queue}-"))
    return statuses


async def test_unchanged_code_is_the_same_on_every_recorded_run_by_default(
    client: Client, task_queue: str, tmp_path: Path,
) -> None:
    """Every recording of this repository (tests/histories and its gates/) and 14 recorded
    today, evaluated with default settings (no TOWER_DB, no --data): every run is the
    same, the lifecycle agent's (whose first two moves share one event) and the migration
    whose schema changed while it waited (migration-gated-1) included. The
    project's live data holds what the recorded runs did, and the eval neither reads nor
    changes it."""
    project = example_project(tmp_path / "project")
    live = project / ".tower" / "tools.sqlite"
    statuses = await record_today(client, task_queue, live, tmp_path / "today")
    assert len(statuses) == 14 and "AWAITING_APPROVAL" in statuses
    files = [*sorted(HISTORIES.glob("*.json")), *sorted(HISTORIES.glob("gates/*.json")),
             *sorted((tmp_path / "today").glob("*.json"))]
    before = digest(live)
    env = {k: v for k, v in cli_env(client.service_client.config.target_host).items()
           if k not in ("TOWER_DB", "TOWER_STREAMS")}
    code, out, err = await tower_cli(
        ["--project", str(project), "eval", *map(str, files), "--json"],
        env=env, cwd=project, timeout=600)
    assert code == 0, (out, err)
    report = json.loads(out)
    verdicts = {r["workflow_id"]: r["verdict"] for r in report["runs"]}
    assert len(verdicts) == 33 and any(run.startswith("today-lifecycle") for run in verdicts)
    assert verdicts == dict.fromkeys(verdicts, "same"), err
    assert "Traceback" not in err and "data fresh (the tools' own seed" in err, err
    assert report["data_untouched"] and str(live) in report["data_checked"]
    assert digest(live) == before

    # --data live starts each run from a copy of that data as it is now: the onboarding
    # account exists already and the column is gone, so those re-runs are refused.
    today = sorted((tmp_path / "today").glob("today-*onboarding*.json")) + \
        sorted((tmp_path / "today").glob("today-*migration-approved.json"))
    code, out, err = await tower_cli(
        ["--project", str(project), "eval", *map(str, today), "--data", "live",
         "--fail-on", "changed"], env=env, cwd=project, timeout=600)
    assert code == 1 and "2 runs: 0 same, 1 changed, 1 regressed" in out, (out, err)
    assert f"data {live}" in err and digest(live) == before
    code, out, err = await tower_cli(
        ["--project", str(project), "eval", str(today[0]), "--data", "nowhere.sqlite"],
        env=env, cwd=project)
    assert code != 0 and "--data nowhere.sqlite: not a file (fresh, live or a tools' " \
        "database)" in err and not out
    # Live data on PostgreSQL is not copied (an eval never writes to a shared database);
    # the refusal shows the URL without its password.
    code, out, err = await tower_cli(
        ["--project", str(project), "eval", str(today[0]), "--data", "live"],
        env={**env, "TOWER_DB": "postgresql://tools:s3cret@127.0.0.1:1/tools"}, cwd=project)
    assert code != 0 and not out and "Traceback" not in err, err
    assert "TOWER_DB is PostgreSQL (postgresql://tools:***@127.0.0.1:1/tools); use --data " \
        "fresh" in err and "s3cret" not in err, err


async def test_a_worker_py_without_bindings_is_named_where_the_eval_needs_them(
    tmp_path: Path,
) -> None:
    """The eval hosts the project's agents itself and binds their tools with worker.py's
    bindings(db_path): a worker.py without it, whose agents' tools need a resource, is
    told so in one line, naming the tools and where the eval looks (no traceback)."""
    project = example_project(tmp_path / "project")
    (project / "worker.py").write_text('"""A worker of its own making, with no bindings."""\n')
    code, out, err = await tower_cli(
        ["--project", str(project), "eval", str(HISTORIES / "order-1.json")],
        env=cli_env("127.0.0.1:1"), cwd=project, timeout=300)
    assert code == 2 and not out and "Traceback" not in err, err
    assert "'charge_payment' needs 'db'" in err, err
    assert "tower eval binds them with worker.py's bindings(db_path)" in err, err

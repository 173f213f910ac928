"""A run started with its first move's search attributes (``search.start_attributes``, as
`tower run` starts runs) spends no history event on them, and is still found by agent and
status: DONE and FAILED from its closed execution. A run started without them (a raw
``temporal workflow start``) upserts them itself, as before. Both replay."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from replaykit import replay
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHistory

from bench.agents import BENCH_WORKFLOWS, Baseline, Steps, StepsAgent
from tower.activities.model import ModelSettings
from tower.cli.cmd_runs import list_rows
from tower.contract import search
from worker import build_worker

UPSERT = EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES


def upserts(history: WorkflowHistory) -> int:
    return sum(1 for e in history.events if e.event_type == UPSERT)


async def listed(client: Client, run: str, status: str) -> dict[str, Any]:
    """The run's row in `tower list --agent bench_steps --status STATUS` (visibility is
    eventually consistent: asked again for a while)."""
    for _ in range(80):
        rows = await list_rows(client, agent="bench_steps", status=status, limit=100)
        found = [r for r in rows if r["run"] == run]
        if found:
            return found[0]
        await asyncio.sleep(0.25)
    raise AssertionError(f"{run} is not listed as {status}")


async def test_started_with_attributes_a_run_costs_what_the_hand_written_loop_costs(
    client: Client, task_queue: str, db_path: Path,
) -> None:
    start = search.start_attributes(StepsAgent.machine)
    ids = {kind: f"attrs-{kind}-{uuid.uuid4().hex[:6]}" for kind in ("with", "raw", "base")}
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings(), workflows=BENCH_WORKFLOWS):
        with_attrs = await client.start_workflow(StepsAgent.run, Steps(n=3), id=ids["with"],
                                                 task_queue=task_queue, search_attributes=start)
        raw = await client.start_workflow(StepsAgent.run, Steps(n=3), id=ids["raw"],
                                          task_queue=task_queue)
        base = await client.start_workflow(Baseline.run, Steps(n=3), id=ids["base"],
                                           task_queue=task_queue)
        # A start the agent's input refuses: the execution fails before any move.
        bad = await client.start_workflow("bench_steps", {"n": 0}, id=f"attrs-bad-{ids['with']}",
                                          task_queue=task_queue, search_attributes=start)
        assert (await with_attrs.result()).done == 3 and (await raw.result()).done == 3
        assert await base.result() == 3
        try:
            await bad.result()
            raise AssertionError("a run with n=0 must fail")
        except WorkflowFailureError:
            pass
        histories = {kind: await client.get_workflow_handle(run).fetch_history()
                     for kind, run in ids.items()}
    # Started with them: no upsert at all, the same events as the hand-written loop.
    assert upserts(histories["with"]) == 0
    assert len(histories["with"].events) == len(histories["base"].events)
    # Started without them: upserted at the first move and at the end.
    assert upserts(histories["raw"]) == 2
    done, raw_done = await listed(client, ids["with"], "DONE"), await listed(
        client, ids["raw"], "DONE")
    assert done["status"] == raw_done["status"] == "DONE" and done["node"] == "DONE"
    failed = await listed(client, bad.id, "FAILED")
    assert failed["status"] == "FAILED"
    # A finished run is not listed as running, whatever AgentStatus it last published.
    running = await list_rows(client, agent="bench_steps", status="RUNNING", limit=100)
    assert not {r["run"] for r in running} & {*ids.values(), bad.id}
    # Both kinds replay against the code that ran them.
    results = await replay([(k, histories[k]) for k in ("with", "raw")],
                           workflows=BENCH_WORKFLOWS)
    assert [(r.ok, r.failure) for r in results] == [(True, None), (True, None)]

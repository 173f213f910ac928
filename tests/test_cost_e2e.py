"""Cost on the real dev server: priced calls, the cost query, the search attribute,
and a token budget that sends a run to its escalation path."""

from __future__ import annotations

import asyncio
import json
import os
import uuid

import pytest
from budget_agents import TightAccount
from conftest import WorkerFactory
from temporalio.client import Client
from towercli import tower_cli
from workerkit import final_state

from tower.activities.model import ModelSettings
from tower.activities.prices import PriceTable
from tower.contract import search
from workflows.account import AccountAgent, AccountRequest, AccountState


async def tower(client: Client, *args: str) -> str:
    """Run the real `tower` command line against the test server; return its stdout."""
    env = {**os.environ, "TEMPORAL_ADDRESS": client.service_client.config.target_host,
           "TEMPORAL_NAMESPACE": client.namespace}
    code, out, err = await tower_cli(list(args), env=env)
    assert code == 0, err
    return out


PRICED = ModelSettings(prices=PriceTable.parse(
    '{"scripted": {"prompt": 0.5, "completion": 1.5}}'))

async def test_cost_per_call_node_and_run(
    client: Client, task_queue: str, scripted_worker: WorkerFactory
) -> None:
    run_id = f"account-{uuid.uuid4().hex[:8]}"
    async with scripted_worker(models=PRICED):
        handle = await client.start_workflow(
            AccountAgent.run, AccountRequest(question="Check my account ACC-1001"),
            id=run_id, task_queue=task_queue)
        state = await handle.result()
        report = await handle.query("cost", result_type=dict)
        cli_json, cli_table = (await tower(client, "cost", run_id, "--json"),
                               await tower(client, "cost", run_id))
    assert json.loads(cli_json) == report
    assert "step 1 reason (scripted)" in cli_table and cli_table.splitlines()[-1].startswith("run")
    calls = report["calls"]
    assert [(c["step"], c["node"], c["model"]) for c in calls] == [
        (1, "reason", "scripted"), (3, "reason", "scripted")]
    for c in calls:  # each call priced from the table: $0.5 and $1.5 per 1k tokens
        expected = (c["prompt_tokens"] * 0.5 + c["completion_tokens"] * 1.5) / 1000
        assert c["cost_usd"] == pytest.approx(expected) and c["cost_usd"] > 0
    run = report["run"]
    assert run["calls"] == 2 and run["cost_usd"] == pytest.approx(sum(c["cost_usd"] for c in calls))
    assert report["nodes"] == {"reason": run}  # lookup_account called no model
    assert state.usage.cost_usd == pytest.approx(run["cost_usd"])
    desc = await handle.describe()
    sa = desc.typed_search_attributes
    assert sa.get(search.AGENT_COST_USD) == pytest.approx(run["cost_usd"])
    assert sa.get(search.AGENT_TOKENS) == run["tokens"]
    # The attribute finds the run (visibility is eventually consistent: poll briefly).
    query = f"WorkflowId = '{run_id}' AND {search.AGENT_COST_USD.name} > 0.0"
    for _ in range(50):
        found = [wf.id async for wf in client.list_workflows(query)]
        if found:
            break
        await asyncio.sleep(0.2)
    assert found == [run_id]
    too_dear = f"WorkflowId = '{run_id}' AND {search.AGENT_COST_USD.name} > 1000.0"
    assert [wf.id async for wf in client.list_workflows(too_dear)] == []


async def test_unpriced_scripted_model_costs_nothing(
    client: Client, task_queue: str, scripted_worker: WorkerFactory
) -> None:
    async with scripted_worker():
        handle = await client.start_workflow(
            AccountAgent.run, AccountRequest(question="Check my account ACC-1001"),
            id=f"account-{uuid.uuid4().hex[:8]}", task_queue=task_queue)
        state = await handle.result()
    assert state.usage.calls == 2 and state.usage.tokens > 0 and state.usage.cost_usd == 0.0


async def test_token_budget_escalates_on_the_server(
    client: Client, task_queue: str, scripted_worker: WorkerFactory
) -> None:
    async with scripted_worker(models=PRICED, workflows=[TightAccount]):
        handle = await client.start_workflow(
            TightAccount.run, AccountRequest(question="Check my account ACC-1001"),
            id=f"tight-{uuid.uuid4().hex[:8]}", task_queue=task_queue)
        state = await final_state(handle, AccountState)
        log = await handle.query("transitions", result_type=list)
    moves = [(t["source"], t["target"]) for t in log]
    assert moves == [("START", "reason"), ("reason", "error"), ("error", "FAILED")]
    assert "token budget exceeded" in log[1]["reason"]
    assert state.status == "FAILED" and state.answer.startswith("Sorry")
    assert any("token budget exceeded" in e for e in state.errors)

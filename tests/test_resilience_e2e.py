"""Model faults on the real dev server: the order agent's model calls go through the
real openai SDK to the loopback server. Which model answered is in the transitions;
Retry-After paces the retry; invalid output is corrected, then recovered, then FAILED."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client
from workerkit import final_state

from tower.activities.model import ModelSettings
from tower.cli.agents import scripted_reply
from tower.core.engine import Transition
from tower.testing.model_server import Fault, LoopbackModelServer
from worker import build_worker
from workflows.order import OrderAgent, OrderRequest, OrderState

TEXT = "1 x WIDGET-1 to 4 Oak Lane, Bristol, GB"


@pytest.fixture
def server() -> Iterator[LoopbackModelServer]:
    with LoopbackModelServer(replies=scripted_reply) as srv:
        yield srv


async def run_order(client: Client, task_queue: str, db_path: Path, server: LoopbackModelServer,
                    models: list[str]) -> tuple[OrderState, list[Transition]]:
    settings = ModelSettings(api_key="loopback", base_url=server.base_url, models=models,
                             timeout_seconds=2)
    async with build_worker(client, task_queue=task_queue, db_path=db_path, models=settings):
        handle = await client.start_workflow(
            OrderAgent.run, OrderRequest(text=TEXT), id=f"order-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue)
        state = await final_state(handle, OrderState)
        log = await handle.query("transitions", result_type=list[Transition])
    return state, log


async def test_the_run_records_the_fallback_model_that_answered(
    client: Client, task_queue: str, db_path: Path, server: LoopbackModelServer
) -> None:
    server.set_down("primary")
    state, log = await run_order(client, task_queue, db_path, server, ["primary", "backup"])
    assert state.status == "DONE"
    by_node = {t.source: t.calls for t in log}
    assert by_node["parse"] == ["model:backup"] and by_node["confirm"] == ["model:backup"]
    assert [(s.model, s.outcome) for s in server.served] == [
        ("primary", "server_error"), ("backup", "ok")] * 2


async def test_retry_after_paces_the_next_attempt(
    client: Client, task_queue: str, db_path: Path, server: LoopbackModelServer
) -> None:
    # Longer than the retry policy's first backoff (1 s): only Retry-After explains the gap.
    server.inject(Fault("rate_limit", retry_after=4))
    state, log = await run_order(client, task_queue, db_path, server, ["primary"])
    assert state.status == "DONE"
    first, second = server.served[0], server.served[1]
    assert (first.outcome, second.outcome) == ("rate_limit", "ok")
    assert second.at - first.at >= 4.0


async def test_invalid_output_is_fed_back_and_corrected(
    client: Client, task_queue: str, db_path: Path, server: LoopbackModelServer
) -> None:
    server.inject(Fault("schema", content='{"items": [], "address": "x"}'),
                  Fault("unknown_tool"))
    state, log = await run_order(client, task_queue, db_path, server, ["primary"])
    assert state.status == "DONE" and state.order is not None
    parse = [s for s in server.served if s.node == "parse"]
    assert [s.outcome for s in parse] == ["schema", "unknown_tool", "ok"]
    assert "answer does not match ParsedOrder" in parse[1].last_message
    assert "items: List should have at least 1 item" in parse[1].last_message
    assert "tool 'transfer_all_funds' is not available here" in parse[2].last_message
    assert next(t for t in log if t.source == "parse").calls == ["model:primary"] * 3


async def test_still_invalid_output_takes_the_declared_failure_path(
    client: Client, task_queue: str, db_path: Path, server: LoopbackModelServer
) -> None:
    # 3 answers per attempt (1 + 2 corrections); recover allows 2 fresh attempts: 9 in all.
    server.inject(*[Fault("schema", model="primary")] * 9)
    state, log = await run_order(client, task_queue, db_path, server, ["primary"])
    moves = [(t.source, t.target) for t in log]
    assert moves == [("START", "parse"), ("parse", "recover"), ("recover", "parse"),
                     ("parse", "recover"), ("recover", "parse"), ("parse", "FAILED")]
    assert state.status == "FAILED" and state.last_error is not None
    assert state.last_error.node == "parse"
    assert "recovery exhausted" in state.errors[-1]
    assert "still invalid after 2 corrections" in state.errors[-1]
    assert len(server.served) == 9

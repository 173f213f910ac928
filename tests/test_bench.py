"""The benchmark's measuring code on a short real thread (figures checked for shape and
sense, never for time), and its table on fixed figures."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from activities.model import ModelSettings
from bench.agents import BENCH_WORKFLOWS, NaiveChat, NaiveMessage
from bench.measure import bytes_per_call, history_bytes, run_chain, turn_costs
from bench.report import table
from bench.suites import combine
from tower.core.window import WindowPolicy
from worker import build_worker
from workflows.chat import ChatAgent, ChatConfig, ChatInput, UserMessage


async def test_turn_costs_follow_the_run_chain(
    client: Client, task_queue: str, db_path: Path
) -> None:
    config = ChatConfig(window=WindowPolicy(max_messages=4, keep_recent=2),
                        continue_as_new_after=40)
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings(), workflows=BENCH_WORKFLOWS):
        chat = await client.start_workflow(ChatAgent.run, ChatInput(config=config),
                                           id=f"chat-{uuid.uuid4().hex[:8]}", task_queue=task_queue)
        naive = await client.start_workflow(NaiveChat.run, id=f"naive-{uuid.uuid4().hex[:8]}",
                                            task_queue=task_queue)
        for t in range(8):
            await chat.execute_update(ChatAgent.send, UserMessage(text=f"hello {t}"))
            await naive.execute_update(NaiveChat.send, NaiveMessage(text=f"hello {t}"))
        await chat.execute_update(ChatAgent.close)
        await naive.execute_update(NaiveChat.close)
        await chat.result()
        assert await naive.result() == 16
        chain = await run_chain(client, chat.id, chat.first_execution_run_id or "")
        naive_chain = await run_chain(client, naive.id, naive.first_execution_run_id or "")
    costs, naive_costs = turn_costs(chain), turn_costs(naive_chain)
    assert len(chain) >= 2 and len(costs) == 8 and len(naive_costs) == 8
    assert all(c.model_calls >= 1 and c.bytes > 0 for c in costs)
    assert sum(c.model_calls for c in costs) > 8  # the reductions' summaries
    assert all(c.model_calls == 1 for c in naive_costs)
    # The naive thread's calls grow with every turn; they carry the whole conversation.
    assert [c.bytes for c in naive_costs] == sorted(c.bytes for c in naive_costs)
    assert bytes_per_call(costs, 8, window=4) > 0
    assert sum(history_bytes(h) for h in chain) > sum(c.bytes for c in costs)


def test_table_marks_missed_targets() -> None:
    step = {"wall_ms": 100.0, "events_per_step": 6.5, "bytes_per_step": 900.0}
    figures = {
        "args": {"concurrent": 200},
        "overhead": {"baseline": step, "tower": {**step, "wall_ms": 120.0},
                     "tower_every_step": {**step, "events_per_step": 7.5}},
        "growth": {"turns": 1000, "turns_per_s": 10.0, "runs": 4, "max_run_events": 4100,
                   "max_run_bytes": 2_000_000, "per_call": {10: 3000.0, 1000: 3300.0},
                   "naive_per_call": {10: 3000.0}, "total": 1, "total_at_same": 10,
                   "naive_turns": 400, "naive_total": 100, "naive_stopped": ""},
        "throughput": {"baseline": {"transitions_per_s": 100.0},
                       "tower": {"transitions_per_s": 95.0}},
        "replay": {"transitions_per_s": 500.0, "histories": 200, "failures": 0},
        "memory": {"runs": 1000, "parked": 1000, "peak_mb": 250.0, "idle_mb": 80.0},
    }
    lines = table(figures).splitlines()
    wall = next(line for line in lines if line.startswith("| wall time"))
    assert "1.20×" in wall and "**no**" in wall
    growth = next(line for line in lines if "turn 1000 vs turn 10" in line)
    assert "1.10×" in growth and "| yes" in growth
    assert "0.10×" in next(line for line in lines if line.startswith("| total history"))


def test_throughput_blocks_combine_as_all_steps_over_all_time() -> None:
    # 2,000 steps in 20 s and 2,000 in 40 s: 4,000 in 60 s, not the mean of 100 and 50.
    fast = {"transitions_per_s": 100.0, "seconds": 20.0, "cpu_ms_per_step": 9.0}
    slow = {"transitions_per_s": 50.0, "seconds": 40.0, "cpu_ms_per_step": 11.0}
    both = combine([fast, slow])
    assert both["transitions_per_s"] == pytest.approx(4000 / 60)
    assert both["seconds"] == 60.0 and both["cpu_ms_per_step"] == 10.0
    assert both["blocks"] == [100.0, 50.0]

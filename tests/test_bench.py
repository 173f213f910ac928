"""The benchmark's measuring code on a short real thread (figures checked for shape and
sense, never for time), and its table on fixed figures."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from bench import chat, cleanup
from bench.agents import BENCH_WORKFLOWS, NaiveChat, NaiveMessage
from bench.measure import history_bytes, run_chain, turn_costs
from bench.parked import decision_latency, park
from bench.report import TURN_BYTES, replay_table, table
from bench.suites import combine
from tower.activities.model import ModelSettings
from tower.cli.trust_files import dev_trust
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
    assert sum(history_bytes(h) for h in chain) > sum(c.bytes for c in costs)


def test_table_marks_missed_targets() -> None:
    step = {"wall_ms": 100.0, "events_per_step": 6.5, "bytes_per_step": 900.0}
    figures: dict[str, Any] = {
        "args": {"concurrent": 200},
        "overhead": {"baseline": step, "tower": {**step, "wall_ms": 120.0},
                     "tower_every_step": {**step, "events_per_step": 7.5}},
        "chat": {"turns": 3000, "turns_per_s": 20.0, "runs": 6, "bytes_per_turn": 2100.0,
                 "events_per_turn": 7.2, "bytes_at_10": 2000.0, "bytes_at_end": 2200.0,
                 "max_run_events": 4100, "max_run_bytes": 2_000_000},
        "pair": {"turns": 300, "latency_ms": {"tower": 40.0, "naive": 50.0},
                 "latency_all_ms": {"tower": 40.0, "naive": 80.0}, "latency_turns": 50,
                 "replay_s": {"tower": 4.5, "naive": 5.0}, "events": {"tower": 2100, "naive": 3300},
                 "bytes": {"tower": 600_000, "naive": 30_000_000}},
        "carry": {"runs": 5, "largest_carried": 2000, "threshold": 8192, "stored_payloads": 0,
                  "failed": []},
        "throughput": {"baseline": {"transitions_per_s": 100.0},
                       "tower": {"transitions_per_s": 95.0}},
        "replay": {"transitions_per_s": 500.0, "histories": 200, "failures": 0},
        "memory": {"runs": 10000, "parked": 10000, "peak_mb": 250.0, "idle_mb": 80.0,
                   "decisions": 40, "decision_p95_s": 0.4},
        "eval": {"runs": 16, "counts": {"same": 16, "changed": 0, "regressed": 0},
                 "per_run_s": 1.0, "replay_per_run_s": 0.25, "setup_s": 4.0},
        "cleanup": {"runs": 50, "turns": 3, "ms_per_run": 4.5, "second_pass_ms": 40.0,
                    "second_pass_removed": {"message store": 0, "stream store": 0},
                    "rows_removed_per_run": {"messages": 6.0, "windows": 3.0, "owners": 9.0,
                                             "stream_events": 72.0},
                    "open_run_answered": True},
    }
    lines = table(figures).splitlines()

    def row(start: str) -> str:
        return next(line for line in lines if line.startswith(f"| {start}"))

    assert "1.20×" in row("wall time") and "**no**" in row("wall time")
    assert "2100" in row("history bytes per chat turn") and "| yes" in row("history bytes per")
    assert "0.65×" in row("events per chat turn") and "| yes" in row("events per chat turn")
    assert "1.10×" in row("bytes per turn, turn 3000") and "**no**" in row("bytes per turn,")
    assert "0.90×" in row("replay of a 300-turn") and "**no**" in row("replay of a 300-turn")
    assert "passes" in row("replay of a continued") and "| yes" in row("replay of a continued")
    assert "0.80×" in row("chat turn latency") and "| yes" in row("chat turn latency")
    assert "| yes" in row("  decision on an evicted run")
    assert "4.00×" in row("eval per recorded run") and "| yes" in row("eval per recorded")
    assert "4.5" in row("retention cleanup, ms per closed run") and "| yes" in row("retention")
    assert "6.0 messages" in row("  rows removed per closed run")
    figures["carry"]["failed"] = ["run 2: PayloadMissing"]
    assert "**no**" in next(line for line in table(figures).splitlines()
                            if "continued" in line)


def test_throughput_blocks_combine_as_all_steps_over_all_time() -> None:
    # 2,000 steps in 20 s and 2,000 in 40 s: 4,000 in 60 s, not the mean of 100 and 50.
    fast = {"transitions_per_s": 100.0, "seconds": 20.0, "cpu_ms_per_step": 9.0}
    slow = {"transitions_per_s": 50.0, "seconds": 40.0, "cpu_ms_per_step": 11.0}
    both = combine([fast, slow])
    assert both["transitions_per_s"] == pytest.approx(4000 / 60)
    assert both["seconds"] == 60.0 and both["cpu_ms_per_step"] == 10.0
    assert both["blocks"] == [100.0, 50.0]


THREAD = 30  # turns: the last 10 (21-30) are apart from the first 10


def assert_turn_bytes(figures: dict[str, Any], turns: int) -> None:
    """Bytes are deterministic (not timings): a 400-character turn records at most
    TURN_BYTES, its run start included. The reply's text is recorded once (issue 32: 2,716 B
    before, when the update returned it again)."""
    assert figures["reply_chars"] == 400 and len(chat.message(turns)) == 400
    assert figures["bytes_per_turn"] <= TURN_BYTES
    assert figures["bytes_at_10"] <= TURN_BYTES and figures["bytes_at_end"] <= TURN_BYTES
    # Flat: the last 10 turns cost what the first 10 did, but for wider numbers.
    assert figures["bytes_at_end"] <= figures["bytes_at_10"] + 40


async def test_chat_suites_measure_short_real_threads(
    env: WorkflowEnvironment, client: Client, task_queue: str, db_path: Path, tmp_path: Path,
) -> None:
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings(), workflows=BENCH_WORKFLOWS):
        thread = await chat.thread(client, task_queue, tmp_path / "chat", turns=THREAD)
        pair = await chat.side_by_side(client, task_queue, turns=4, rounds=1,
                                       keep=tmp_path / "pair")
    carry = await chat.empty_store(env.client.service_client.config.target_host,
                                   f"{task_queue}-carry", tmp_path, turns=20)
    assert len(chat.message(7)) == 400 and chat.message(7) != chat.message(8)
    assert thread["runs"] == 1 and thread["bytes_at_10"] > 400  # a turn holds its message
    assert thread["events_per_turn"] > 4
    assert_turn_bytes(thread, THREAD)
    assert pair["events"]["naive"] >= 4 * 11  # one activity per hand-written turn
    assert set(pair["replay_s"]) == set(pair["latency_ms"]) == {"tower", "naive"}
    assert all(v > 0 for v in [*pair["replay_s"].values(), *pair["latency_ms"].values()])
    # `python -m bench replay`: the kept pair read again, each read timed apart.
    kept = await chat.replay_kept(tmp_path / "pair", 2)
    assert kept["turns"] == 4 and kept["events"] == pair["events"]
    assert set(kept["replay_s"]) == {"tower", "naive", "naive_tower_sandbox"}
    assert all(len(v) == 2 for v in kept["replays_s"].values())
    assert all(v > 0 for v in [*kept["replay_s"].values(), *kept["load_s"].values()])
    shown = replay_table({**kept, "histories": "kept", "load_average": [(1.0,), (2.0,)]})
    assert "replay of a 4-turn thread vs hand-written" in shown and "≤ 0.80×" in shown
    # Continued at least twice, each carried input under the store's threshold, and every
    # run replayed with the store gone.
    assert carry["runs"] >= 3 and 0 < carry["largest_carried"] < carry["threshold"]
    assert carry["failed"] == []


@pytest.mark.soak  # the bench's own figure, 100 turns; the default tier's thread has 30
async def test_a_400_character_chat_turn_records_at_most_2500_bytes(
    client: Client, task_queue: str, tmp_path: Path,
) -> None:
    figures = await chat.thread(client, task_queue, tmp_path / "chat", turns=100)
    assert_turn_bytes(figures, 100)


async def test_the_cleanup_suite_reports_a_pass_over_closed_threads(
    client: Client, task_queue: str, tmp_path: Path,
) -> None:
    figures = await cleanup.cost(client, task_queue, tmp_path / "cleanup", runs=2, turns=2)
    assert figures["runs_removed"] == {"message store": 2, "stream store": 2}
    assert set(figures["second_pass_removed"].values()) == {0}  # idempotent
    gone = figures["rows_removed_per_run"]
    # Each closed thread's own messages (2 turns: 2 asked, 2 answered), windows and
    # stream; the open thread's all stay and it answers again.
    assert gone["messages"] == 4 and gone["windows"] >= 2 and gone["stream_events"] > 0
    assert figures["rows_left"]["messages"] >= 4 and figures["open_run_answered"]
    assert figures["ms_per_run"] > 0


async def test_decisions_reach_evicted_parked_runs(
    client: Client, task_queue: str, db_path: Path,
) -> None:
    # A one-run cache: of three parked runs, the first two are evicted when decided. The
    # bench's deployment allows unsigned decisions (a development setting).
    trust = db_path.parent / "bench-trust"
    dev_trust(trust, client.namespace, approvers={}, unsigned_allowed=True)
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings(), workflows=BENCH_WORKFLOWS,
                            max_cached_workflows=1, trust_dir=trust):
        ids = [f"park-{uuid.uuid4().hex[:8]}" for _ in range(3)]
        # Started two at a time, as the memory suite keeps them under the cache.
        assert await park(client, task_queue, ids, in_flight=2, limit_s=120) == 3
        for run in ids:  # parked: the gate's timer is in the history
            handle = client.get_workflow_handle(run)
            while not any(e.event_type == EventType.EVENT_TYPE_TIMER_STARTED
                          for e in (await handle.fetch_history()).events):
                await asyncio.sleep(0.1)
        seconds = await decision_latency(client, ids)
        states = [await client.get_workflow_handle(run).result() for run in ids]
    assert len(seconds) == 3 and all(s > 0 for s in seconds)
    assert [s["status"] for s in states] == ["DONE"] * 3
    assert all(s["acted"] for s in states)  # approved: the gated node ran

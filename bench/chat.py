"""Chat-turn measurements: history per turn (400-character messages and replies), growth
over a long thread, turn latency and replay against the hand-written agent, and replay with
the payload store deleted."""

from __future__ import annotations

import shutil
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from bench.agents import NaiveChat, NaiveMessage
from bench.measure import history_bytes, run_chain, turn_costs
from bench.streaming import REPLY
from tower.activities.model import ModelSettings
from tower.contract.search import start_attributes
from tower.contract.wire import ModelReply, ModelRequest
from tower.core.window import WindowPolicy
from tower.temporal import TowerPlugin
from tower.temporal._sandbox import sandbox_runner
from tower.temporal.payloads import tower_data_converter
from tower.temporal.replay import replay as replay_checked
from tower.testing.model_server import LoopbackModelServer
from worker import build_worker
from workflows.chat import ChatAgent, ChatConfig, ChatInput, UserMessage

# A 400-character user message, different every turn (the turn number leads it).
PAD = "please keep this in mind for later, it matters to me and my team. "


def message(turn: int) -> str:
    return (f"turn {turn:05d}: " + PAD * 7)[:400]


# Threads start as `tower chat` starts them: with their first move's search attributes.
CHAT_START = start_attributes(ChatAgent.machine)


def _id(kind: str) -> str:
    return f"bench-{kind}-{uuid.uuid4().hex[:8]}"


def _reply(request: ModelRequest) -> ModelReply:
    return ModelReply(model="loopback", content=REPLY)


async def thread(client: Client, tq: str, folder: Path, *, turns: int) -> dict[str, Any]:
    """One Tower thread of ``turns`` 400-character turns (a 400-character message, a
    400-character reply from the loopback model through the openai SDK, unstreamed): what
    each turn costs, early and late."""
    folder.mkdir(parents=True, exist_ok=True)
    with LoopbackModelServer(replies=_reply) as model:
        models = ModelSettings(api_key="loopback", base_url=model.base_url,
                               models=["loopback"], stream=False)
        async with build_worker(client, task_queue=f"{tq}-chat", models=models,
                                db_path=folder / "tools.sqlite"):
            handle = await client.start_workflow(ChatAgent.run, ChatInput(), id=_id("chat"),
                                                 task_queue=f"{tq}-chat",
                                                 search_attributes=CHAT_START)
            start = time.perf_counter()
            for t in range(1, turns + 1):
                await handle.execute_update(ChatAgent.send, UserMessage(text=message(t)))
            elapsed = time.perf_counter() - start
            await handle.execute_update(ChatAgent.close)
            await handle.result()
    chain = await run_chain(client, handle.id, handle.first_execution_run_id or "")
    costs = turn_costs(chain)
    total_bytes = sum(history_bytes(h) for h in chain)
    total_events = sum(len(h.events) for h in chain)

    def median_bytes(end: int) -> float:
        # The median of the 10 turns ending at ``end``: a turn that also reduced the window
        # (one in eight) does not move it, so this compares plain turns early and late.
        return statistics.median(c.bytes for c in costs[max(end - 10, 0):end])

    return {"turns": turns, "turns_per_s": turns / elapsed, "runs": len(chain),
            "reply_chars": len(REPLY),
            # Everything the thread stored, run starts, reductions and continue-as-new
            # included, per turn.
            "bytes_per_turn": total_bytes / turns, "events_per_turn": total_events / turns,
            "bytes_at_10": median_bytes(10), "bytes_at_100": median_bytes(min(100, turns)),
            "bytes_at_end": median_bytes(turns),
            "max_run_events": max(len(h.events) for h in chain),
            "max_run_bytes": max(history_bytes(h) for h in chain)}


async def side_by_side(client: Client, tq: str, *, turns: int, rounds: int,
                       keep: Path | None = None) -> dict[str, Any]:
    """A Tower thread and the hand-written one, turn by turn in turns (latency), then each
    history replayed ``rounds`` times, alternating (replay time). With ``keep``, the two
    histories are written there too (``replay_kept`` replays them again)."""
    tower = await client.start_workflow(ChatAgent.run, ChatInput(), id=_id("chat"),
                                        task_queue=tq, search_attributes=CHAT_START)
    naive = await client.start_workflow(NaiveChat.run, id=_id("naive"), task_queue=tq)
    latency: dict[str, list[float]] = {"tower": [], "naive": []}
    for t in range(1, turns + 1):
        order = ("tower", "naive") if t % 2 else ("naive", "tower")
        for kind in order:
            start = time.perf_counter()
            if kind == "tower":
                await tower.execute_update(ChatAgent.send, UserMessage(text=message(t)))
            else:
                await naive.execute_update(NaiveChat.send, NaiveMessage(text=message(t)))
            latency[kind].append(time.perf_counter() - start)
    histories = {"tower": await tower.fetch_history(), "naive": await naive.fetch_history()}
    await tower.execute_update(ChatAgent.close)
    await naive.execute_update(NaiveChat.close)
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        for kind, history in histories.items():
            (keep / KEPT[kind]).write_text(history.to_json())
    replays = await _replay_times(histories, rounds)
    early = min(50, turns)
    return {
        "turns": turns,
        "latency_ms": {k: 1000 * statistics.median(v[:early]) for k, v in latency.items()},
        "latency_all_ms": {k: 1000 * statistics.median(v) for k, v in latency.items()},
        "latency_turns": early,
        "replay_s": {k: statistics.median(v) for k, v in replays.items()},
        "events": {k: len(h.events) for k, h in histories.items()},
        "bytes": {k: history_bytes(h) for k, h in histories.items()},
    }


KEPT = {"tower": "tower.json", "naive": "naive.json"}  # side_by_side's histories, kept


async def replay_kept(folder: Path, rounds: int) -> dict[str, Any]:
    """The two histories ``side_by_side`` kept in ``folder``, read (CPU time counted apart)
    and replayed ``rounds`` times each, alternating; and, to tell what Tower's sandbox
    gives any workflow, the hand-written one in Tower's sandbox too."""
    histories, load_s = {}, {}
    for kind, name in KEPT.items():
        start = time.process_time()
        histories[kind] = WorkflowHistory.from_json(kind, (folder / name).read_text())
        load_s[kind] = time.process_time() - start
    histories["naive_tower_sandbox"] = histories["naive"]
    replays = await _replay_times(histories, rounds)
    return {"turns": len(turn_costs([histories["tower"]])), "rounds": rounds,
            "replay_s": {k: statistics.median(v) for k, v in replays.items()},
            "replays_s": replays, "load_s": load_s,
            "events": {k: len(histories[k].events) for k in KEPT},
            "bytes": {k: history_bytes(histories[k]) for k in KEPT}}


async def _replay_times(histories: dict[str, WorkflowHistory], rounds: int,
                        ) -> dict[str, list[float]]:
    # The hand-written agent replays in the SDK's own sandbox and with its pydantic
    # converter, as a project without Tower has them, with the same restrictions and
    # pass-through modules (its module imports Tower's); Tower's with TowerPlugin, as a
    # worker, `tower replay` and tower.testing have it (the payload store and codec from
    # the environment; tower.temporal._sandbox: cheaper per payload; the same payloads).
    # (naive_tower_sandbox: the hand-written one in Tower's sandbox, when asked for.)
    runners = {"naive": SandboxedWorkflowRunner(
                   restrictions=sandbox_runner("activities").restrictions),
               "naive_tower_sandbox": sandbox_runner("activities")}
    replayers = {kind: Replayer(workflows=[ChatAgent], plugins=[TowerPlugin()])
                 if kind == "tower" else
                 Replayer(workflows=[NaiveChat], data_converter=pydantic_data_converter,
                          workflow_runner=runners[kind])
                 for kind in histories}
    for kind in histories:  # warm up: imports and the one-off sandbox check
        await replayers[kind].replay_workflow(histories[kind])
    # CPU time of this process (the SDK core's threads included): on a shared machine the
    # wall time of the same replay varied twofold from one run to the next.
    times: dict[str, list[float]] = {k: [] for k in histories}
    kinds = list(histories)
    for r in range(rounds):
        for kind in (kinds if r % 2 else kinds[::-1]):
            start = time.process_time()
            await replayers[kind].replay_workflow(histories[kind])
            times[kind].append(time.process_time() - start)
    return times


async def empty_store(address: str, tq: str, folder: Path, *, turns: int,
                      threshold: int = 8 * 1024) -> dict[str, Any]:
    """A thread with a never-reduced window that continues-as-new, on a client and worker
    whose payloads over ``threshold`` go to an external store; then the store is deleted
    and every run replayed from its history."""
    store = folder / "payloads"
    client = await Client.connect(address, plugins=[TowerPlugin(
        data_converter=tower_data_converter(store, threshold, env={}))])
    config = ChatConfig(window=WindowPolicy(max_messages=1000, max_tokens=1_000_000),
                        continue_as_new_after=60)
    async with build_worker(client, task_queue=tq, db_path=folder / "tools.sqlite",
                            models=ModelSettings()):
        handle = await client.start_workflow(ChatAgent.run, ChatInput(config=config),
                                             id=_id("carry"), task_queue=tq,
                                             search_attributes=CHAT_START)
        for t in range(1, turns + 1):
            await handle.execute_update(ChatAgent.send, UserMessage(text=message(t)))
        await handle.execute_update(ChatAgent.close)
        await handle.result()
    chain = await run_chain(client, handle.id, handle.first_execution_run_id or "")
    carried = [h.events[-1].workflow_execution_continued_as_new_event_attributes.input.ByteSize()
               for h in chain[:-1]]
    stored = sum(1 for p in store.rglob("*") if p.is_file()) if store.exists() else 0
    shutil.rmtree(store, ignore_errors=True)
    results = await replay_checked([(f"run {i}", h) for i, h in enumerate(chain)],
                                   workflows=[ChatAgent])
    failed = [f"{r.source}: {r.failure or r.problems}" for r in results if not r.ok]
    return {"runs": len(chain), "largest_carried": max(carried, default=0),
            "threshold": threshold, "stored_payloads": stored, "failed": failed}

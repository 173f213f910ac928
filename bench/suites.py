"""The benchmark's measurements. Each returns plain figures; ``bench.__main__`` prints them."""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from bench.agents import Baseline, Steps, StepsAgent, StepsEveryAgent
from bench.measure import history_bytes
from tower.contract.search import start_attributes
from tower.temporal import TowerPlugin

KINDS: dict[str, Any] = {
    "baseline": Baseline.run, "tower": StepsAgent.run, "tower_every_step": StepsEveryAgent.run}
# Tower's runs start as `tower run` starts them: with their first move's search attributes.
OPTIONS: dict[str, dict[str, Any]] = {
    "baseline": {}, "tower": {"search_attributes": start_attributes(StepsAgent.machine)},
    "tower_every_step": {"search_attributes": start_attributes(StepsEveryAgent.machine)}}


def _id(kind: str) -> str:
    return f"bench-{kind}-{uuid.uuid4().hex[:8]}"


async def overhead(client: Client, tq: str, *, runs: int, n: int) -> dict[str, Any]:
    """Sequential runs, kinds interleaved so drift hits all alike; medians compared."""
    times: dict[str, list[float]] = {k: [] for k in KINDS}
    histories: dict[str, WorkflowHistory] = {}
    for i in range(runs):
        order = list(KINDS) if i % 2 == 0 else list(reversed(KINDS))
        for kind in order:
            handle = await client.start_workflow(KINDS[kind], Steps(n=n), id=_id(kind),
                                                 task_queue=tq, **OPTIONS[kind])
            start = time.perf_counter()
            await handle.result()
            times[kind].append(time.perf_counter() - start)
            if i == 0:
                histories[kind] = await handle.fetch_history()
    out: dict[str, Any] = {}
    for kind in KINDS:
        h = histories[kind]
        out[kind] = {"wall_ms": 1000 * statistics.median(times[kind]),
                     "events_per_step": len(h.events) / n,
                     "bytes_per_step": history_bytes(h) / n}
    return out


async def throughput(client: Client, tq: str, kind: str, *, runs: int, n: int) -> dict[str, Any]:
    start, cpu = time.perf_counter(), time.process_time()
    handles = await asyncio.gather(*(client.start_workflow(
        KINDS[kind], Steps(n=n), id=_id(kind), task_queue=tq, **OPTIONS[kind])
        for _ in range(runs)))
    await asyncio.gather(*(h.result() for h in handles))
    elapsed = time.perf_counter() - start
    # CPU time of this process (worker + client): unlike wall time, other jobs on the
    # machine do not move it.
    cpu_ms = 1000 * (time.process_time() - cpu) / (runs * n)
    return {"transitions_per_s": runs * n / elapsed, "seconds": elapsed,
            "cpu_ms_per_step": cpu_ms, "handles": handles}


def combine(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """Throughput blocks of one kind as one figure: all steps over all their time."""
    seconds = sum(b["seconds"] for b in blocks)
    steps = sum(b["transitions_per_s"] * b["seconds"] for b in blocks)
    return {"transitions_per_s": steps / seconds, "seconds": seconds,
            "cpu_ms_per_step": sum(b["cpu_ms_per_step"] for b in blocks) / len(blocks),
            "blocks": [round(b["transitions_per_s"], 1) for b in blocks]}


async def _each(histories: list[WorkflowHistory]) -> AsyncIterator[WorkflowHistory]:
    for history in histories:
        yield history


async def replay(handles: list[Any], workflow: type, transitions_each: int) -> dict[str, Any]:
    histories = await asyncio.gather(*(h.fetch_history() for h in handles))
    replayer = Replayer(workflows=[workflow], plugins=[TowerPlugin()])  # as a worker has it
    start = time.perf_counter()
    results = await replayer.replay_workflows(_each(histories), raise_on_replay_failure=False)
    elapsed = time.perf_counter() - start
    failures = len(results.replay_failures)
    return {"transitions_per_s": len(histories) * transitions_each / elapsed,
            "histories": len(histories), "failures": failures}

"""Worker memory with many runs parked at an approval gate, and how fast a decision on a
run long evicted from the worker's cache reaches the run's next step.

The worker runs in its own process (``python -m bench.parked ADDRESS QUEUE DB``) so its
peak RSS (VmHWM) is the worker's alone, not the benchmark's client.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.contrib.pydantic import pydantic_data_converter

from bench.agents import BENCH_WORKFLOWS, REVIEW_TIMEOUT, WORKFLOW_TASKS, ParkedAgent, ParkRequest
from tower.activities.model import ModelSettings
from tower.cli.trust_files import dev_trust
from tower.contract.decisions import GateRecord, proposal_digest
from tower.contract.search import start_attributes
from tower.core.signing import decision_claims
from worker import build_worker


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/{pid}/status")


async def _expiry(client: Client, run: str) -> datetime:
    """When the run's pending request expires, from its history alone: a query would load
    the run back into the worker's cache, which is what the measurement must not do."""
    history = await client.get_workflow_handle(run).fetch_history()
    # The gate parks in the run's first completed workflow task (an earlier attempt may have
    # failed or timed out): its now() is that task's start, and the request expires the
    # gate's timeout later.
    started = None
    for e in history.events:
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            started = e
        elif e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            break
    assert started is not None, f"{run} has not run a workflow task"
    # now() as the SDK makes it: the task's time in float seconds, to a datetime.
    now = datetime.fromtimestamp(started.event_time.ToNanoseconds() / 1e9, UTC)
    return now + REVIEW_TIMEOUT


async def decision_latency(client: Client, ids: list[str]) -> list[float]:
    """Seconds from sending each approval to the run having taken its next step (DONE)."""
    seconds = []
    for run in ids:
        handle = client.get_workflow_handle(run)
        pending = (await handle.query("approvals", result_type=dict))["pending"]
        # The bench's deployment allows unsigned decisions (a development setting).
        shown = GateRecord.model_validate(pending)
        claims = decision_claims(tenant=client.namespace, run=run, run_id=shown.run_id,
                                 gate="review", request=shown.step,
                                 proposal=proposal_digest(shown), verdict="approve", sub="bench",
                                 role="manager", jti=f"bench-{uuid.uuid4().hex[:8]}",
                                 now=time.time())
        start = time.perf_counter()
        try:
            await handle.execute_update("decide", {"unsigned": claims.model_dump(mode="json")},
                                        result_type=dict)
        except WorkflowUpdateFailedError as exc:  # the refusal's reason, not just "failed"
            raise RuntimeError(f"decision on {run} refused: {exc.cause}") from exc
        await handle.result()
        seconds.append(time.perf_counter() - start)
    return seconds


async def park(client: Client, tq: str, ids: list[str], *, in_flight: int,
               limit_s: float = 3600) -> int:
    """Start the runs, at most ``in_flight`` of them not yet parked; the number parked.

    Started all at once, 10,000 runs wait for their next workflow task while the worker's
    cache holds 250: a run is evicted between its tasks and rebuilds its sandbox and
    replays at each one (measured: ~1.9 runs/s parked). Kept under the cache, each run
    builds its sandbox once. The end state is the same: every run parked at its gate.
    """
    query = f'TaskQueue="{tq}" AND AgentStatus="AWAITING_APPROVAL"'
    started = parked = 0
    deadline = time.monotonic() + limit_s
    while parked < len(ids) and time.monotonic() < deadline:
        room = in_flight - (started - parked)
        if room > 0 and started < len(ids):
            batch = ids[started:started + room]
            await asyncio.gather(*(client.start_workflow(
                ParkedAgent.run, ParkRequest(), id=run, task_queue=tq,
                search_attributes=start_attributes(ParkedAgent.machine)) for run in batch))
            started += len(batch)
        await asyncio.sleep(0.25)
        # The gate publishes AWAITING_APPROVAL to visibility.
        parked = (await client.count_workflows(query)).count
    return parked


async def memory(client: Client, address: str, tq: str, db: Path, *, runs: int,
                 cache: int, decisions: int = 20) -> dict[str, Any]:
    # Its stderr goes to a file: the SDK's runtime can print a fatal-at-exit message when
    # the process is stopped, which says nothing about the measurement.
    log = db.with_suffix(".log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "bench.parked", address, tq, str(db),
                             str(cache)],
                            stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the parked-runs worker did not start")
        idle_kb = _status_kb(proc.pid, "VmRSS")
        start = time.perf_counter()
        ids = [f"bench-parked-{uuid.uuid4().hex[:8]}" for _ in range(runs)]
        # A quarter of the cache in flight: the runs parked last are in the cache too, and
        # more recently used than a run waiting for its gate's activities (the run id, the
        # attestation). With half the cache in flight those got evicted and replayed in a
        # new sandbox (py-spy: half the worker's CPU creating instances; 8 runs/s, 17 with
        # a quarter, on 400 runs).
        parked = await park(client, tq, ids, in_flight=max(1, cache // 4))
        elapsed = time.perf_counter() - start
        figures = {"runs": runs, "parked": parked, "cache": cache, "seconds": elapsed,
                   "runs_per_s": parked / elapsed,
                   "idle_mb": idle_kb / 1024,
                   "rss_mb": _status_kb(proc.pid, "VmRSS") / 1024,
                   "peak_mb": _status_kb(proc.pid, "VmHWM") / 1024}
        # The runs started first: with more runs than the cache holds, long evicted.
        latencies = sorted(await decision_latency(client, ids[:decisions]))
        figures.update(decisions=len(latencies), decision_p50_s=statistics.median(latencies),
                       decision_p95_s=latencies[math.ceil(0.95 * len(latencies)) - 1])
        return figures
    finally:
        # The process this function started, by its own handle: SIGINT lets the worker
        # shut down cleanly; kill only if it does not.
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


async def _serve(address: str, tq: str, db: str, cache: str) -> None:
    client = await Client.connect(address, data_converter=pydantic_data_converter)
    # The parked runs load a roster and policy like every gated run: a throw-away tenant.
    trust = Path(db).with_name("trust")
    dev_trust(trust, client.namespace, approvers={}, unsigned_allowed=True)
    async with build_worker(client, task_queue=tq, db_path=db, models=ModelSettings(),
                            trust_dir=trust,
                            workflows=BENCH_WORKFLOWS,
                            max_concurrent_workflow_tasks=WORKFLOW_TASKS,
                            # Each cached run keeps its own sandbox (~0.4 MB); a parked
                            # run needs none: evicted, it replays its history on waking.
                            max_cached_workflows=int(cache)):
        print("ready", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(*sys.argv[1:5]))

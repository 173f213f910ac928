"""`python -m bench`: the whole benchmark on a dev server it starts itself.

Prints one table of figures measured side by side in this run (ratios, not
absolute times: the machine changes, the ratios should not). ``--quick`` shrinks
every suite for a smoke run. ``python -m bench replay`` measures only the replay of the
300-turn pair (``--histories DIR`` keeps the two recorded histories there, and replays
them again next time without recording). ``python -m bench surface``: Tower's size, read
from its code (bench/surface.py), no server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import uuid
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from bench import chat, cleanup, evals, parked, streaming, suites, surface, workflow_streams
from bench.agents import BENCH_WORKFLOWS, WORKFLOW_TASKS, StepsAgent
from bench.report import replay_table, table
from tower.activities.model import ModelSettings
from tower.cli.devserver import temporal_binary
from tower.contract import search
from worker import build_worker


async def _suite(figures: dict[str, Any], name: str, work: Awaitable[Any]) -> None:
    """Run one suite; a failure is reported in the table instead of losing the others."""
    print(f"{name} ...", flush=True)
    try:
        figures[name] = await work
    except Exception as exc:  # noqa: BLE001 - any failure becomes a row saying so
        figures[name] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    shown = {k: v for k, v in figures[name].items() if k != "handles"}
    print(json.dumps(shown, default=str)[:2000], flush=True)


async def _throughput(client: Any, tq: str, runs: int) -> dict[str, Any]:
    """Each kind twice, in ABBA order: the dev server slows as its history grows, so
    whichever kind ran first would look faster (by up to 15 % on this machine)."""
    blocks: dict[str, list[dict[str, Any]]] = {"baseline": [], "tower": []}
    for kind in ("baseline", "tower", "tower", "baseline"):
        blocks[kind].append(await suites.throughput(client, tq, kind, runs=runs, n=10))
    return {**{kind: suites.combine(done) for kind, done in blocks.items()},
            "handles": blocks["tower"][0]["handles"]}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(), data_converter=pydantic_data_converter,
        search_attributes=search.ALL, dev_server_log_level="error")
    tmp = Path(tempfile.mkdtemp(prefix="tower-bench-"))
    figures: dict[str, Any] = {"args": vars(args)}
    try:
        client, tq = env.client, f"bench-{uuid.uuid4().hex[:6]}"
        async with build_worker(client, task_queue=tq, db_path=tmp / "tools.sqlite",
                                models=ModelSettings(), workflows=BENCH_WORKFLOWS,
                                max_concurrent_workflow_tasks=WORKFLOW_TASKS):
            await _suite(figures, "overhead", suites.overhead(client, tq, runs=args.runs, n=10))
            await _suite(figures, "chat", chat.thread(client, tq, tmp / "chat",
                                                      turns=args.turns))
            await _suite(figures, "pair", chat.side_by_side(client, tq, turns=args.pair_turns,
                                                            rounds=args.rounds))
            await _suite(figures, "carry", chat.empty_store(
                env.client.service_client.config.target_host, f"{tq}-carry", tmp / "carry",
                turns=args.carry_turns))
            await _suite(figures, "streaming", streaming.side_by_side(
                client, tq, tmp / "streaming", turns=args.stream_turns))
            await _suite(figures, "workflow_streams", workflow_streams.side_by_side(
                client, tq, turns=args.stream_turns))
            await _suite(figures, "cleanup", cleanup.cost(client, f"{tq}-cleanup",
                                                          tmp / "cleanup", runs=args.cleanup))
            await _suite(figures, "throughput", _throughput(client, tq, args.concurrent))
            handles = figures["throughput"].pop("handles", [])
            # 10 steps = 11 transitions (START -> work, work -> work x9, work -> DONE)
            await _suite(figures, "replay", suites.replay(handles, StepsAgent, 11))
        address = env.client.service_client.config.target_host
        await _suite(figures, "memory", parked.memory(client, address, f"{tq}-parked",
                                                      tmp / "parked.sqlite", runs=args.parked,
                                                      cache=args.cache,
                                                      decisions=args.decisions))
    finally:
        await env.shutdown()
    # An eval starts a dev server of its own: measured after the shared one is gone.
    await _suite(figures, "eval", evals.cost())
    return figures


async def replay_only(args: argparse.Namespace) -> dict[str, Any]:
    """The 300-turn pair's replay alone: recorded once (on a dev server of its own) into
    ``--histories``, then read and replayed in alternating rounds."""
    folder = args.histories or Path(tempfile.mkdtemp(prefix="tower-bench-replay-"))
    if not all((folder / name).exists() for name in chat.KEPT.values()):
        print(f"recording the {args.pair_turns}-turn pair into {folder} ...", flush=True)
        env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=temporal_binary(), data_converter=pydantic_data_converter,
            search_attributes=search.ALL, dev_server_log_level="error")
        try:
            tq = f"bench-{uuid.uuid4().hex[:6]}"
            async with build_worker(env.client, task_queue=tq, db_path=folder / "tools.sqlite",
                                    models=ModelSettings(), workflows=BENCH_WORKFLOWS,
                                    max_concurrent_workflow_tasks=WORKFLOW_TASKS):
                await chat.side_by_side(env.client, tq, turns=args.pair_turns, rounds=1,
                                        keep=folder)
        finally:
            await env.shutdown()
    before = os.getloadavg()
    figures = await chat.replay_kept(folder, args.rounds)
    return {**figures, "histories": str(folder), "load_average": [before, os.getloadavg()]}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite", nargs="?", choices=["all", "replay"], default="all",
                        help="replay: only the 300-turn pair's replay")
    parser.add_argument("--histories", type=Path,
                        help="replay: the folder the pair's histories are kept in (recorded "
                        "there first when missing)")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--runs", type=int, default=10, help="sequential runs per kind")
    parser.add_argument("--turns", type=int, default=3000, help="Tower chat thread length")
    parser.add_argument("--pair-turns", type=int, default=300,
                        help="turns of the side-by-side threads (latency, replay)")
    parser.add_argument("--rounds", type=int, help="replays of each history (5; replay: 9)")
    parser.add_argument("--carry-turns", type=int, default=40,
                        help="turns of the thread replayed with its payload store deleted")
    parser.add_argument("--stream-turns", type=int, default=40,
                        help="chat turns of the streaming comparison")
    parser.add_argument("--cleanup", type=int, default=50,
                        help="closed threads one retention cleanup pass removes")
    parser.add_argument("--concurrent", type=int, default=200)
    parser.add_argument("--parked", type=int, default=10_000)
    # The worker's RSS follows its cache, not its parked runs: 200 cached runs kept a
    # 10,000-run worker at 282 MB peak, 250 at 315 MB (docs/benchmarks.md).
    parser.add_argument("--cache", type=int, default=200,
                        help="the parked-runs worker's max_cached_workflows")
    parser.add_argument("--decisions", type=int, default=40,
                        help="decisions sent to evicted parked runs (latency)")
    if sys.argv[1:2] == ["surface"]:  # no server: its own few options
        sizes = argparse.ArgumentParser(prog="python -m bench")
        surface.add_command(sizes.add_subparsers(dest="command", required=True))
        raise SystemExit(surface.main(sizes.parse_args()))
    ns = parser.parse_args()
    if ns.rounds is None:
        ns.rounds = 9 if ns.suite == "replay" else 5
    if ns.quick:
        ns.runs, ns.turns, ns.pair_turns, ns.rounds, ns.carry_turns = 3, 40, 30, 2, 20
        ns.concurrent, ns.parked, ns.cache, ns.decisions = 20, 60, 20, 5
        ns.stream_turns, ns.cleanup = 5, 5
    if ns.suite == "replay":
        print(replay_table(asyncio.run(replay_only(ns))))
    else:
        print(table(asyncio.run(main(ns))))

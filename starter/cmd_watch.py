"""`tower watch RUN`: follow an existing run live, from its first transition."""

from __future__ import annotations

import argparse
import json

from starter.connection import connect
from starter.live import watch


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "watch", help="follow a run's transitions live",
        description="Print RUN's transitions so far, then each new one as it happens, with a "
                    "progress line (step, current node, status, elapsed) until the run ends. "
                    "A run waiting at an approval gate is watched on until it is decided, "
                    "unless --until-pause. --json prints JSON Lines, one object per "
                    "transition, then a final {\"event\": \"end\", ...}.")
    p.add_argument("run", metavar="RUN", help="workflow id")
    p.add_argument("--until-pause", action="store_true",
                   help="stop when the run waits at an approval gate")
    p.add_argument("--timeout", type=float, help="give up after this many seconds")
    p.add_argument("--json", action="store_true", help="JSON Lines for scripts")
    p.set_defaults(handler=run)


async def run(args: argparse.Namespace) -> int:
    client = await connect()
    progress = await watch(client.get_workflow_handle(args.run), as_json=args.json,
                           stop_at_pause=args.until_pause, timeout=args.timeout)
    if args.json:
        print(end_event(progress.run, progress.status, progress.step, progress.node))
    return 1 if progress.status == "FAILED" else 0


def end_event(run: str, status: str, step: int, node: str, **extra: object) -> str:
    return json.dumps({"event": "end", "run": run, "status": status, "step": step,
                       "node": node, **extra}, sort_keys=True, default=str)

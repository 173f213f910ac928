"""`tower cost RUN`: tokens and estimated dollars of a run, per node and per model call."""

from __future__ import annotations

import argparse
import json
from typing import Any

from starter.common import not_found_is
from starter.connection import connect


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "cost", help="a run's token usage and estimated cost",
        description="Print what run RUN spent on models: the run's total, each node's and "
                    "each call's tokens and estimated cost (prices from TOWER_PRICES on the "
                    "worker; an unpriced model counts $0).")
    p.add_argument("run", metavar="RUN", help="workflow id")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(handler=run)


async def run(args: argparse.Namespace) -> int:
    client = await connect()
    with not_found_is(f"run {args.run!r} not found"):
        report: dict[str, Any] = await client.get_workflow_handle(args.run).query(
            "cost", result_type=dict)
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
        return 0
    print(format_report(report), end="")
    return 0


def format_report(report: dict[str, Any]) -> str:
    def row(label: str, f: dict[str, Any]) -> str:
        return (f"{label:<28} {f['calls']:>5} {f['prompt_tokens']:>9} "
                f"{f['completion_tokens']:>10} {f['cost_usd']:>12.6f}\n")

    out = f"{'':<28} {'calls':>5} {'prompt':>9} {'completion':>10} {'cost $':>12}\n"
    for c in report.get("calls", []):
        out += row(f"  step {c['step']} {c['node']} ({c['model']})", c)
    for node, f in report.get("nodes", {}).items():
        out += row(f"node {node}", f)
    if report.get("run"):
        out += row("run", report["run"])
    return out

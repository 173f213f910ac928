"""`tower cost RUN`: tokens and estimated dollars of a run, per node and per model call."""

from __future__ import annotations

from typing import Any

import click

from tower.cli.output import json_option, print_json, table, tenant_option


@click.command("cost", help=(
    "Print what run RUN spent on models: the run's total, each node's and each call's tokens "
    "and estimated cost (prices from TOWER_PRICES on the worker; an unpriced model counts $0)."))
@click.argument("run", metavar="RUN")
@json_option("print the report as JSON")
@tenant_option
def command(run: str, as_json: bool) -> Any:
    return _cost(run, as_json)


async def _cost(run: str, as_json: bool) -> int:
    from tower.cli.common import not_found_is
    from tower.cli.runs import query
    from tower.client import connect
    from tower.contract import names

    client = await connect()
    with not_found_is(f"run {run!r} not found"):
        report: dict[str, Any] = await query(client, client.get_workflow_handle(run),
                                             names.COST.name, dict)
    if as_json:
        print_json(report)
        return 0
    table(["", "calls", "prompt", "completion", "cost $"], rows(report))
    return 0


def rows(report: dict[str, Any]) -> list[list[Any]]:
    def row(label: str, f: dict[str, Any]) -> list[Any]:
        return [label, f["calls"], f["prompt_tokens"], f["completion_tokens"],
                f"{f['cost_usd']:.6f}"]

    out = [row(f"  step {c['step']} {c['node']} ({c['model']})", c)
           for c in report.get("calls", [])]
    out += [row(f"node {node}", f) for node, f in report.get("nodes", {}).items()]
    if report.get("run"):
        out.append(row("run", report["run"]))
    return out

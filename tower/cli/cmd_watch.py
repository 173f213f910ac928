"""`tower watch RUN`: follow an existing run live, from its first transition."""

from __future__ import annotations

import json
from typing import Any

import click

from tower.cli.output import json_option, tenant_option
from tower.contract.render import inert


@click.command("watch", help=(
    "Print RUN's transitions so far, then each new one as it happens, with a progress line "
    "(step, current node, status, elapsed) until the run ends. A run waiting at an approval "
    "gate is watched on until it is decided, unless --until-pause. --json prints JSON Lines, "
    "one object per transition, then a final {\"event\": \"end\", ...}."))
@click.argument("run", metavar="RUN")
@click.option("--until-pause", is_flag=True, help="stop when the run waits at an approval gate")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True),
              help="give up after this many seconds")
@json_option("JSON Lines for scripts")
@tenant_option
def command(run: str, until_pause: bool, timeout: float | None, as_json: bool) -> Any:
    return _watch(run, until_pause, timeout, as_json)


async def _watch(run: str, until_pause: bool, timeout: float | None, as_json: bool) -> int:
    from tower.cli.live import watch
    from tower.client import connect

    client = await connect()
    progress = await watch(client.get_workflow_handle(run), as_json=as_json,
                           stop_at_pause=until_pause, timeout=timeout)
    why = {"reason": progress.reason} if progress.reason else {}
    if as_json:
        print(end_event(progress.run, progress.status, progress.step, progress.node, **why),
              flush=True)
    elif progress.reason:
        # The run's words (a tool's, a model's): one inert line, whatever they hold.
        print(f"{progress.run} ended {progress.status}: {inert(progress.reason)}", flush=True)
    return 1 if progress.failed else 0


def end_event(run: str, status: str, step: int, node: str, **extra: object) -> str:
    return json.dumps({"event": "end", "run": run, "status": status, "step": step,
                       "node": node, **extra}, sort_keys=True, default=str)

"""`tower retry RUN --from NODE`: an operator's decision on a FAILED run: a reset to just
before it last entered NODE (``tower.client.retry``). A retry refused (the run did not fail,
it never entered NODE) changes nothing."""

from __future__ import annotations

import getpass
import io

import click

from tower.cli.agents import agents
from tower.cli.live import follow, watch
from tower.cli.output import json_option, print_json, tenant_option
from tower.client import connect
from tower.client import retry as retry_from


@click.command("retry", help=(
    "Take FAILED run RUN back to NODE and follow it: Temporal resets the run to just before "
    "it last entered NODE, and the new run goes on from there with the current code. "
    "Effects already made for the same action are found by their key, not made again."))
@click.argument("run", metavar="RUN")
@click.option("--from", "node", required=True, metavar="NODE",
              help="the node to run again (`tower inspect RUN` shows the path)")
@click.option("--by", default=None, help="who decides (default: your user name); recorded "
                                         "in the reset's reason")
@click.option("--no-follow", is_flag=True, help="do not follow the run")
@json_option("the reset (new run id) and the run's status after following, as JSON")
@tenant_option
async def retry(run: str, node: str, by: str | None, no_follow: bool, as_json: bool) -> int:
    by = by or getpass.getuser()
    client = await connect()
    done = await retry_from(client, run, node, by=by, workflows=list(agents().values()))
    handle = client.get_workflow_handle(run)  # the newest run: the one the reset started
    if as_json:
        status = None if no_follow else (await watch(
            handle, as_json=False, out=io.StringIO(), progress_line=False)).status
        print_json({"run": run, "retry_from": node, "by": by, "answer": done.answer,
                    "new_run_id": done.new_run_id, "status": status})
        return 0
    print(done.answer)
    if not no_follow:
        print(f"status: {await follow(handle, skip=done.skip)}")
    return 0

"""`tower retry RUN --from NODE` and `tower abort RUN`: an operator's decision on a FAILED run.

A FAILED run waits (``failed_wait``) for one of these before it closes. Both are
Temporal updates whose validators refuse a bad decision (unknown node, a run that
is not FAILED) before it reaches the history: the run is left exactly as it was.
"""

from __future__ import annotations

import getpass
import io
from typing import Any

import click
from temporalio.client import Client, WorkflowUpdateFailedError

from starter.common import CliError, not_found_is
from starter.connection import connect
from starter.live import follow as follow_run
from starter.live import watch
from starter.output import json_option, print_json, tenant_option
from tower.contract.wire import AbortRequest, RetryRequest


@click.command("retry", help="Take FAILED run RUN back to NODE and follow it.")
@click.argument("run", metavar="RUN")
@click.option("--from", "node", required=True, metavar="NODE",
              help="the node to run next (`tower graph AGENT` shows them)")
@click.option("--by", default=None, help="who decides (default: your user name)")
@click.option("--no-follow", is_flag=True, help="do not follow the run")
@json_option("the run's answer (and its status after following) as JSON")
@tenant_option
def retry(run: str, node: str, by: str | None, no_follow: bool, as_json: bool) -> Any:
    return _retry(run, node, by or getpass.getuser(), not no_follow, as_json)


@click.command("abort", help="Close FAILED run RUN now instead of waiting for a retry.")
@click.argument("run", metavar="RUN")
@click.option("--by", default=None, help="who decides (default: your user name)")
@click.option("--reason", default="", help="recorded in the run's errors")
@json_option("the run's answer as JSON")
@tenant_option
def abort(run: str, by: str | None, reason: str, as_json: bool) -> Any:
    return _abort(run, by or getpass.getuser(), reason, as_json)


async def send_retry(client: Client, run: str, node: str, by: str) -> str:
    return await _update(client, run, "retry", RetryRequest(node=node, by=by))


async def send_abort(client: Client, run: str, by: str, reason: str = "") -> str:
    return await _update(client, run, "abort", AbortRequest(by=by, reason=reason))


async def _retry(run: str, node: str, by: str, follow: bool, as_json: bool) -> int:
    client = await connect()
    answer = await send_retry(client, run, node, by)
    status = None
    if as_json:
        if follow:
            status = (await watch(client.get_workflow_handle(run), as_json=False,
                                  out=io.StringIO(), progress_line=False)).status
        print_json({"run": run, "retry_from": node, "by": by, "answer": answer,
                    "status": status})
        return 0
    print(answer)
    if follow:
        status = await follow_run(client.get_workflow_handle(run))
        print(f"status: {status}")
    return 0


async def _abort(run: str, by: str, reason: str, as_json: bool) -> int:
    client = await connect()
    answer = await send_abort(client, run, by, reason)
    if as_json:
        print_json({"run": run, "aborted_by": by, "reason": reason, "answer": answer})
    else:
        print(answer)
    return 0


async def _update(client: Client, run: str, name: str, request: object) -> str:
    handle = client.get_workflow_handle(run)
    try:
        with not_found_is(f"run {run!r} not found or already closed"):
            result: str = await handle.execute_update(name, request, result_type=str)
    except WorkflowUpdateFailedError as exc:
        cause = exc.cause
        raise CliError(f"{name} refused for {run!r}: {getattr(cause, 'message', cause)}") from None
    return result

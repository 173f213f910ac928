"""`tower retry RUN --from NODE` and `tower abort RUN`: an operator's decision on a FAILED run.

A FAILED run waits (``failed_wait``) for one of these before it closes. Both are
Temporal updates whose validators refuse a bad decision (unknown node, a run that
is not FAILED) before it reaches the history: the run is left exactly as it was.
"""

from __future__ import annotations

import argparse
import getpass

from temporalio.client import Client, WorkflowUpdateFailedError

from starter.common import CliError, follow, not_found_is
from starter.connection import connect
from tower.contract.wire import AbortRequest, RetryRequest


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("retry", help="retry a FAILED run from a named node",
                       description="Take FAILED run RUN back to NODE and follow it.")
    p.add_argument("run", metavar="RUN", help="workflow id")
    p.add_argument("--from", dest="node", required=True, metavar="NODE",
                   help="the node to run next (`tower graph AGENT` shows them)")
    p.add_argument("--by", default=None, help="who decides (default: your user name)")
    p.add_argument("--no-follow", action="store_true", help="do not follow the run")
    p.set_defaults(handler=retry)

    p = sub.add_parser("abort", help="close a FAILED run for good",
                       description="Close FAILED run RUN now instead of waiting for a retry.")
    p.add_argument("run", metavar="RUN", help="workflow id")
    p.add_argument("--by", default=None, help="who decides (default: your user name)")
    p.add_argument("--reason", default="", help="recorded in the run's errors")
    p.set_defaults(handler=abort)


async def send_retry(client: Client, run: str, node: str, by: str) -> str:
    return await _update(client, run, "retry", RetryRequest(node=node, by=by))


async def send_abort(client: Client, run: str, by: str, reason: str = "") -> str:
    return await _update(client, run, "abort", AbortRequest(by=by, reason=reason))


async def retry(args: argparse.Namespace) -> int:
    client = await connect()
    print(await send_retry(client, args.run, args.node, args.by or getpass.getuser()))
    if not args.no_follow:
        status = await follow(client.get_workflow_handle(args.run))
        print(f"status: {status}")
    return 0


async def abort(args: argparse.Namespace) -> int:
    client = await connect()
    print(await send_abort(client, args.run, args.by or getpass.getuser(), args.reason))
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

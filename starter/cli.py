"""The `tower` command line. Each command lives in its own module with
``register(subparsers)``; this file only lists them and turns errors into exit codes."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import traceback
from collections.abc import Sequence

from temporalio.service import RPCError

from starter import (
    cmd_approve,
    cmd_chat,
    cmd_codec,
    cmd_cost,
    cmd_dev,
    cmd_graph,
    cmd_inspect,
    cmd_model_server,
    cmd_operator,
    cmd_replay,
    cmd_run,
    cmd_runs,
    cmd_watch,
    demo,
)
from starter.common import CliError
from starter.connection import ServerUnreachable, UnknownTenant, use_tenant
from starter.output import add_json_flags, error_json, wrapped
from starter.telemetry import TracingConfigError, flush_traces

COMMANDS = [cmd_dev, demo, cmd_run, cmd_chat, cmd_runs, cmd_graph, cmd_replay, cmd_inspect,
            cmd_approve, cmd_cost, cmd_codec, cmd_watch, cmd_operator, cmd_model_server]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tower",
        description="Run AI agents as explicit state machines on Temporal.",
        epilog="Connection settings: TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_PROFILE "
               "(temporalio.envconfig). Models: OPENAI_API_KEY, OPENAI_BASE_URL, TOWER_MODELS.",
    )
    tenant_help = ("act within tenant NAME (its own Temporal namespace); default "
                   "TEMPORAL_NAMESPACE or 'default'")
    parser.add_argument("--tenant", dest="act_tenant", metavar="NAME", help=tenant_help)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS:
        module.register(sub)
    # `tower state RUN --tenant acme` works as well as `tower --tenant acme state RUN`.
    for command in sub.choices.values():
        if "--tenant" not in command._option_string_actions:
            command.add_argument("--tenant", dest="act_tenant", metavar="NAME",
                                 default=argparse.SUPPRESS, help=tenant_help)
    add_json_flags(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    as_json = getattr(args, "json", False)
    try:
        use_tenant(getattr(args, "act_tenant", None))
        if as_json and not args.json_native:
            return wrapped(args.command, lambda: _dispatch(args))
        return _dispatch(args)
    except (CliError, ServerUnreachable, UnknownTenant, TracingConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        if as_json and args.json_native:
            print(error_json(exc, 2))
        return 2
    except RPCError as exc:
        print(f"error: the Temporal server refused the request: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _dispatch(args: argparse.Namespace) -> int:
    result = args.handler(args)
    if asyncio.iscoroutine(result):
        # Not asyncio.run: closing the loop while the SDK's Rust runtime still holds
        # callbacks on it can abort the process. entry() exits right after instead.
        result = asyncio.new_event_loop().run_until_complete(result)
    return int(result or 0)


def entry() -> None:
    """Console entry point. Exits with os._exit after flushing: the SDK's Rust runtime
    can abort the process if the interpreter tears it down while a client is alive."""
    try:
        code = main()
    except SystemExit as exc:  # argparse: --help, usage errors
        code = exc.code if isinstance(exc.code, int) else 2
    except BaseException:  # an unexpected error still exits without interpreter teardown
        traceback.print_exc()
        code = 1
    flush_traces()  # os._exit skips atexit, where the exporters would otherwise flush
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()

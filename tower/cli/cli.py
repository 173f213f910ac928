"""The `tower` command line: a click group that imports a command's module only when that
command runs, so `tower --help` loads neither Temporal nor the agents.

A command (an ``async def`` or a plain one) returns its exit code; errors a user can fix
raise ``CliError`` (``error: ...``, exit 2). Register it in ``COMMANDS`` with the line
`tower --help` shows without importing it.
"""

from __future__ import annotations

import asyncio
import importlib
import signal
import sys
import threading
import traceback
from collections.abc import Sequence
from typing import Any

import click

from tower.cli import output, project
from tower.cli.agents import use_agents
from tower.cli.errors import user_error
from tower.client.errors import RunUnreadable

# name: (module:attribute below tower.cli, the one line `tower --help` shows)
COMMANDS: dict[str, tuple[str, str]] = {
    "new": ("cmd_new:command", "create a project: one gated agent, its tools, a worker and tests"),
    "dev": ("devserver:command", "start the embedded Temporal dev server"),
    "setup": ("server_setup:command",
              "create namespaces and register search attributes (idempotent)"),
    "demo": ("demo:command", "run the demo: server, worker and every demo agent"),
    "worker": ("cmd_worker:command",
               "run the project's worker (its worker.py), draining on SIGTERM or Ctrl-C"),
    "run": ("cmd_run:command", "start an agent run and follow it"),
    "chat": ("cmd_chat:command", "send messages to a chat thread (a new one without THREAD)"),
    "state": ("cmd_runs:state", "print a run's current state as JSON"),
    "list": ("cmd_runs:list_runs", "list agent runs"),
    "watch": ("cmd_runs:watch", "follow a run's transitions live"),
    "graph": ("cmd_graph:command", "draw an agent's state machine (mermaid, svg)"),
    "inspect": ("cmd_inspect:inspect", "a run's transition table and its state at any step"),
    "fork": ("cmd_inspect:fork", "restart a run from step N (Temporal reset)"),
    "history": ("cmd_replay:history", "export a run's event history"),
    "replay": ("cmd_replay:replay", "replay histories against the current code"),
    "eval": ("cmd_eval:command",
             "re-run recorded runs against the current code: same, changed or regressed"),
    "pending": ("approvals:pending", "list runs awaiting an approval decision"),
    "approve": ("approvals:approve", "approve a run's pending gate (signed decision)"),
    "reject": ("approvals:reject", "reject a run's pending gate (signed decision)"),
    "keys": ("trust_files:keys", "approvers' signing keys and the tenant's roster"),
    "inbox": ("cmd_inbox:command",
              "the approvers' web inbox: list and decide runs waiting at gates"),
    "retry": ("cmd_inspect:retry", "reset a FAILED run to a named node, and follow it"),
    "cost": ("cmd_runs:cost", "a run's token usage and estimated cost"),
    "stores": ("cmd_stores:command",
               "where messages, streams and large payloads are kept, and whether each answers"),
    "tools": ("cmd_tools:command",
              "the tools a tenant's agents can use: built in and from MCP servers"),
    "codec-server": ("codec_server:command",
                     "serve /encode and /decode so the Web UI shows encrypted payloads"),
    "model-server": ("cmd_model_server:command",
                     "serve the scripted model over OpenAI-compatible HTTP"),
}

EPILOG = ("Connection settings: TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_PROFILE "
          "(temporalio.envconfig). Models: OPENAI_API_KEY, OPENAI_BASE_URL, TOWER_MODELS. "
          "Web UI links: TOWER_UI_URL.")


class LazyGroup(click.Group):
    """Commands listed from ``COMMANDS``; a command's module is imported when it is used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, _, attr = COMMANDS[cmd_name][0].partition(":")
        return getattr(importlib.import_module(f"tower.cli.{module}"), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, line) for name, (_, line) in COMMANDS.items()])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]},
             epilog=EPILOG)
@output.tenant_option
@click.option("--project", metavar="DIR", expose_value=False, is_eager=True,
              callback=lambda ctx, param, folder: project.use(folder),
              help="the Tower project to serve (default: the nearest folder at or above "
                   "this one with a workflows/ package)")
@click.option("--agents", metavar="MODULE[,MODULE]", expose_value=False, is_eager=True,
              # Eager: a command's module (which may list the agents in its help) loads after.
              callback=lambda ctx, param, modules: use_agents(modules),
              help="the project's modules or packages holding its @agent classes (default: "
                   "workflows/registry.py's AGENTS, else every agent in workflows/)")
def cli() -> None:
    """Run AI agents as explicit state machines on Temporal."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command in a fresh event loop; its exit code."""
    output.reset()
    if "tower.client.connection" in sys.modules:  # a previous in-process call chose a tenant
        sys.modules["tower.client.connection"].use_tenant(None)
    args = list(sys.argv[1:] if argv is None else argv)
    stopped_by: list[int] = []
    try:
        result = cli.main(args=args, prog_name="tower", standalone_mode=False)
        if asyncio.iscoroutine(result):
            result = _run(result, stopped_by)
    except BaseException as exc:  # noqa: BLE001  (turned into an exit code)
        # Interrupted: what it started is stopped; a teardown error is no news to the user.
        return 128 + stopped_by[0] if stopped_by else _exit_code(exc)
    return int(result or 0)


def _run(coro: Any, stopped_by: list[int]) -> Any:
    """Run a command's coroutine; the signal that cancels it (Ctrl-C, SIGTERM: its
    ``finally`` blocks stop what it started before it exits 128 + signal) goes in
    ``stopped_by``."""
    # Not asyncio.run: closing the loop while the SDK's Rust runtime still holds
    # callbacks on it can abort the process. entry() exits right after instead.
    loop = asyncio.new_event_loop()
    task = loop.create_task(coro)

    def stop(signum: int) -> None:
        stopped_by.append(signum)
        task.cancel()

    handled = []
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(signum) == signal.SIG_IGN:
                continue  # started with it ignored (`nohup`, a script's `&`): it stays so
            try:
                loop.add_signal_handler(signum, stop, signum)
                handled.append(signum)
            except (NotImplementedError, RuntimeError, ValueError):
                pass  # not on this platform or in this thread: the default handling stays
    try:
        return loop.run_until_complete(task)
    finally:
        for signum in handled:
            loop.remove_signal_handler(signum)


def _exit_code(exc: BaseException) -> int:
    """Print what a user needs to know about ``exc``; the exit code it means."""
    if isinstance(exc, click.exceptions.Exit):  # --help and friends
        return exc.exit_code
    if isinstance(exc, click.exceptions.Abort | KeyboardInterrupt):
        return 130
    if isinstance(exc, BrokenPipeError):
        return 1  # `tower list | head -3`: the reader has gone; click exits 1 there too
    if isinstance(exc, SystemExit):  # as Python exits: SystemExit("error: ...") says it
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr, flush=True)
        return 1
    if isinstance(exc, click.ClickException):
        message = exc.format_message()
        if isinstance(exc, click.UsageError) and exc.ctx is not None:
            message += f"\n(see `{exc.ctx.command_path} --help`)"
        return output.fail(message, exc.exit_code)
    line = user_error(exc)
    if line is None:
        raise exc
    # A run that cannot be read is no mistake of the asker's: exit 1, as a failed run does.
    return output.fail(line, 1 if isinstance(exc, RunUnreadable) else 2)


def entry() -> None:
    """Console entry point. Exits with os._exit after flushing: the SDK's Rust runtime
    can abort the process if the interpreter tears it down while a client is alive."""
    try:
        code = main()
    except KeyboardInterrupt:  # Ctrl-C before or after the command's own loop
        code = 130
    except BaseException:  # an unexpected error still exits without interpreter teardown
        traceback.print_exc()
        code = 1
    from tower.temporal._process import flush_and_exit

    flush_and_exit(code)


if __name__ == "__main__":
    entry()

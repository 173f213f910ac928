"""`tower worker [ARGS...]`: run the project's worker, as `python worker.py ARGS...` would."""

from __future__ import annotations

import sys
from typing import Any

import click

from tower.cli import project
from tower.cli.common import CliError
from tower.cli.output import json_option, print_json


@click.command("worker", context_settings={"ignore_unknown_options": True,
                                           "allow_interspersed_args": False}, help=(
    "Run the worker of the project this command serves (its worker.py's main(), from the "
    "project folder found as for every command, or --project DIR). ARGS go to the worker "
    "as `python worker.py ARGS` would pass them (Tower's example: --task-queue, --tenant). "
    "SIGTERM or Ctrl-C drains it: running activities finish, then it exits 0."))
@click.argument("args", nargs=-1, type=click.UNPROCESSED, metavar="[ARGS]...")
@json_option("print the project, its worker and ARGS as one JSON line, then run it (its log "
             "goes to stderr)")
def command(args: tuple[str, ...], as_json: bool) -> Any:
    folder = project.root()
    if not (folder / "worker.py").is_file():
        raise CliError(f"the project at {folder} has no worker.py to run")
    main = getattr(project.module("worker"), "main", None)
    if not callable(main):
        raise CliError(f"{folder / 'worker.py'} has no main() to run")
    # As `python worker.py ARGS` runs it: a main that parses sys.argv reads these.
    sys.argv = [str(folder / "worker.py"), *args]
    if as_json:
        print_json({"project": str(folder), "worker": sys.argv[0], "args": list(args)},
                   line=True)
    # An async main's coroutine is run as any command's; its SystemExit("error: ...") is
    # said and exits 1, as `python worker.py` would.
    return main()

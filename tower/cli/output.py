"""How commands print: JSON for scripts (``--json``: data only, never prose), rich tables
for people, and the options every command shares. Imports no Temporal (`tower --help`)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


class _Mode:
    json = False  # set by the --json option of the command being run


def reset() -> None:
    _Mode.json = False


def json_mode() -> bool:
    return _Mode.json


def json_option(help: str = "print the outcome as JSON (data only)") -> Callable[[F], F]:
    def remember(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
        _Mode.json = _Mode.json or value
        return value

    return click.option("--json", "as_json", is_flag=True, help=help, callback=remember,
                        is_eager=True)


def _use_tenant(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value:
        from tower.client import use_tenant

        use_tenant(value)


# `tower state RUN --tenant acme` works as well as `tower --tenant acme state RUN`.
tenant_option = click.option("--tenant", metavar="NAME", callback=_use_tenant, expose_value=False,
                             help="act within tenant NAME (its own Temporal namespace); default "
                                  "TEMPORAL_NAMESPACE or 'default'")


def run_argument(f: F) -> F:
    """RUN and --run-id: how every command that reads one run's history names it."""
    f = click.option("--run-id", help="a particular run of RUN (default: the latest)")(f)
    return click.argument("run", metavar="RUN")(f)


def print_json(data: Any, *, line: bool = False) -> None:
    """One JSON document on stdout: indented, or one line (JSON Lines) with ``line``."""
    print(json.dumps(data, sort_keys=True, default=str, indent=None if line else 2), flush=True)


def emit(event: dict[str, Any], text: str, *, err: bool = False) -> None:
    """``event`` as a JSON line under --json, else ``text`` for people."""
    if _Mode.json:
        print_json(event, line=True)
    say(text, err=err)


def fail(message: str, code: int) -> int:
    """``error: MESSAGE`` on stderr (and the error as JSON on stdout under --json)."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    if _Mode.json:
        print(json.dumps({"error": message, "exit_code": code}), flush=True)
    return code


def say(text: str = "", *, err: bool = False) -> None:
    """A line for people; nothing under --json (where only data goes to stdout)."""
    if not _Mode.json:
        print(text, file=sys.stderr if err else sys.stdout, flush=True)


def table(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, empty: str = "") -> None:
    """A table on stdout: a bold header on a terminal, plain aligned columns in a pipe (one
    row per line for `grep` and `head`), never a cut cell."""
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from tower.contract.render import inert

    tty = sys.stdout.isatty()
    grid = Table(box=box.SIMPLE_HEAD if tty else None, show_edge=False, pad_edge=False,
                 header_style="bold" if tty else "")
    for name in columns:
        grid.add_column(name, no_wrap=True, overflow="ignore")
    for row in rows:
        # Inert text, not markup: a cell may be a run's words ("[/x]", an escape sequence).
        grid.add_row(*(Text(inert("" if cell is None else str(cell))) for cell in row))
    # Never cut a column to fit a width: a long row wraps on the terminal, whole in a pipe.
    console = Console(width=10_000, highlight=False, color_system="auto" if tty else None,
                      force_terminal=tty)
    with console.capture() as captured:
        console.print(grid)
    for line in captured.get().splitlines():
        print(line.rstrip())
    sys.stdout.flush()
    if not rows and empty:
        print(empty, flush=True)

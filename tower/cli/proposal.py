"""How the terminal shows a proposal: the library's one rendering (``tower.contract.render``),
printed whole and as plain text — never through rich markup, so ``[/x]`` in a refund
message is text, and never cut, so a script's last line is on screen before it is signed.
It is wrapped by the renderer to the terminal's width, never by the terminal: a line the
terminal wrapped would carry no gutter, and could read as a field.

``tower approve`` shows the request and asks before it signs; ``--yes`` (for scripts)
skips the question, not the showing. Without a terminal to ask on and without ``--yes``
it signs nothing.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from typing import IO, Any

import click

from tower.cli.errors import CliError
from tower.contract.decisions import GateRecord, canonical_proposal
from tower.contract.render import MORE, WIDTH, Rendered, fit, inert, render_proposal

# Where a surface's own line goes on when it is too long: in the proposal's values' gutter
# (tower pending and tower approve show the proposal at indent "  "), never where a name is.
GUTTER = "      " + MORE


def columns(out: IO[str]) -> int:
    """The width of the terminal ``out`` writes to; else ``$COLUMNS`` or 80 (a pipe)."""
    try:
        return os.get_terminal_size(out.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return shutil.get_terminal_size((WIDTH, 24)).columns


def print_pending(row: dict[str, Any]) -> None:
    """One waiting run of `tower pending`: who must decide, until when, and the proposal."""
    width = columns(sys.stdout)
    head = (f"{inert(row['run'])} · agent {inert(row['agent'])} · step {row.get('step')} · "
            f"role {inert(row['role'])} · expires {inert(row.get('expires_at') or '?')}")
    lines = fit(head, GUTTER, width)  # the run's id is the requester's text
    shown = row.get("shown")
    if not shown:
        lines += fit(f"  gate {inert(row['gate'])} ({inert(row['when'])} "
                     f"{inert(row['node'])}): proposal unknown (the run published none)",
                     GUTTER, width)
    else:
        lines += render_proposal(shown).lines(indent="  ", width=width)
    print("\n".join(lines), end="\n\n", flush=True)


def show_request(request: GateRecord, digest: str, *, verb: str, err: bool) -> Rendered:
    """Print the whole request a decision is about to be signed for, and the proposal
    digest it will name (on stderr with ``err``: under --json stdout is data only)."""
    rendered = render_proposal(canonical_proposal(request))
    out = sys.stderr if err else sys.stdout
    width = columns(out)
    lines = fit(f"You are about to {verb} this request (step {request.step} of run id "
                f"{inert(request.run_id)}, role {inert(request.role)}):", GUTTER, width)
    lines += rendered.lines(indent="  ", width=width)
    lines += fit(f"  digest {digest}", GUTTER, width)
    print("\n".join(lines), file=out, flush=True)
    return rendered


def confirmer(verb: str, *, yes: bool, ask: bool, err: bool
              ) -> Callable[[GateRecord, str], bool]:
    """The ``confirm`` hook of ``tower.client.decide``: show the request whole, then sign
    only with ``yes`` or, when ``ask``, an explicit "y" typed on the terminal."""
    def confirm(request: GateRecord, digest: str) -> bool:
        rendered = show_request(request, digest, verb=verb, err=err)
        if yes or not ask:
            return True
        if not sys.stdin.isatty():
            raise CliError(f"nothing was signed: {verb} asks for confirmation on a terminal; "
                           "read the request above and pass --yes to sign it from a script")
        question = f"Sign this {verb}?"
        if rendered.hidden:
            question = f"It holds hidden or look-alike characters (shown as escapes). {question}"
        return click.confirm(question, default=False, err=err)
    return confirm

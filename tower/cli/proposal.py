"""How the terminal shows a proposal: the library's one rendering (``tower.contract.render``),
printed whole and as plain text — never through rich markup, so ``[/x]`` in a refund
message is text, and never cut, so a script's last line is on screen before it is signed.

``tower approve`` shows the request and asks before it signs; ``--yes`` (for scripts)
skips the question, not the showing. Without a terminal to ask on and without ``--yes``
it signs nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from tower.cli.errors import CliError
from tower.contract.decisions import GateRecord, canonical_proposal
from tower.contract.render import Rendered, inert, render_proposal


def print_pending(row: dict[str, Any]) -> None:
    """One waiting run of `tower pending`: who must decide, until when, and the proposal."""
    head = (f"{inert(row['run'])} · agent {inert(row['agent'])} · step {row.get('step')} · "
            f"role {inert(row['role'])} · expires {inert(row.get('expires_at') or '?')}")
    print(head)
    shown = row.get("shown")
    if not shown:
        print(f"  gate {inert(row['gate'])} ({inert(row['when'])} {inert(row['node'])}): "
              "proposal unknown (the run published none)")
    else:
        for line in render_proposal(shown).lines(indent="  "):
            print(line)
    print(flush=True)


def show_request(request: GateRecord, digest: str, *, verb: str, err: bool) -> Rendered:
    """Print the whole request a decision is about to be signed for, and the proposal
    digest it will name (on stderr with ``err``: under --json stdout is data only)."""
    rendered = render_proposal(canonical_proposal(request))
    out = sys.stderr if err else sys.stdout
    print(f"You are about to {verb} this request (step {request.step} of run id "
          f"{inert(request.run_id)}, role {inert(request.role)}):", file=out)
    for line in rendered.lines(indent="  "):
        print(line, file=out)
    print(f"  digest {digest}", file=out, flush=True)
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
            question = f"It holds hidden characters (shown as escapes). {question}"
        return click.confirm(question, default=False, err=err)
    return confirm

"""The CLI's side of decisions: ``--set`` edits, the policy check before a run starts, the
deployment `tower pending` and the inbox trust, and how the terminal shows a proposal.

A proposal is printed by the library's one rendering (``tower.contract.render``), whole and
as plain text: never through rich markup, so ``[/x]`` in a refund message is text, and
never cut, so a script's last line is on screen before it is signed. The renderer wraps it
to the terminal's width: a line the terminal wrapped would carry no gutter, and could read
as a field. Making, signing and sending a decision is the client's.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import click
from pydantic import BaseModel

from tower.activities.trust import TrustError, read_trust, trust_dir
from tower.cli import project
from tower.cli.errors import CliError
from tower.client._pending import Deployment
from tower.contract.decisions import GateRecord, canonical_proposal
from tower.contract.render import MORE, WIDTH, Rendered, fit, inert, render_proposal
from tower.core.policy import PolicyInvalid, PolicyLoosened, effective

# Where a surface's own line goes on when it is too long: in the proposal's values' gutter
# (shown at indent "  "), never where a name is.
GUTTER = "      " + MORE


def parse_edits(pairs: list[str] | None) -> dict[str, Any]:
    """``--set field=value``: the value is JSON when it parses (numbers, true), else text."""
    edits: dict[str, Any] = {}
    for pair in pairs or []:
        field, sep, raw = pair.partition("=")
        if not sep or not field.strip():
            raise CliError(f"--set expects field=value, got {pair!r}")
        try:
            edits[field.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            edits[field.strip()] = raw
    return edits


def check_policy(agent: Any, request: BaseModel, tenant: str,
                 root: Path | None = None) -> None:
    """Refuse, before the run starts, an input that would loosen the tenant's policy. Where
    this client cannot read the deployment's trust directory the run itself refuses it."""
    policy_model = getattr(agent, "Policy", None)
    if policy_model is None:
        return
    try:
        snapshot = read_trust(root or trust_dir(), tenant)
    except TrustError:
        return
    try:
        effective(policy_model, snapshot.policy.agents.get(agent.machine.name, {}), request)
    except (PolicyLoosened, PolicyInvalid) as exc:
        raise CliError(f"this input may not start a run: {exc}") from None


def deployment(tenant: str, root: Path | None = None) -> Deployment:
    """The tenant's roster (its attesting worker keys), the project's agents and the
    deployment's task queues (TOWER_TASK_QUEUES, comma-separated; default the project's)."""
    from tower.cli.agents import agents

    try:
        roster = read_trust(root or trust_dir(), tenant).roster
        names = frozenset(agents())
    except (TrustError, ValueError) as exc:
        raise CliError(f"cannot tell genuine requests from forged ones: {exc}") from None
    queues = os.environ.get("TOWER_TASK_QUEUES") or project.task_queue()
    return Deployment(roster=roster, agents=names,
                      queues=frozenset(q.strip() for q in queues.split(",") if q.strip()))


def unattested(deployment: Deployment, tenant: str) -> str | None:
    """Why no request can be listed at all (None: the roster enrols an attestation key)."""
    if any(m.attests for m in deployment.roster.members):
        return None
    return (f"tenant {tenant!r}'s roster enrols no attestation key, so no worker can vouch "
            "for a request and none is listed: `tower keys worker` makes and enrols one "
            "(docs/production.md)")


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


def print_waiting(approvals: dict[str, Any]) -> None:
    """What a followed run waits for at its gate (its ``approvals`` query), and how to decide."""
    p = approvals.get("pending")
    if not p:
        return
    print(f"waiting at gate {p['gate']} ({p['when']} {p['node']}) for role {p['role']} until "
          f"{p['expires_at']}")
    proposal = canonical_proposal(GateRecord.model_validate(p))
    for line in render_proposal(proposal).lines(indent="  ", width=columns(sys.stdout)):
        print(line)
    print(f"decide with: tower approve {approvals['run']} --by NAME   (signs with NAME's key; "
          f"the roster must give NAME role {p['role']}; or tower reject ...)")


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

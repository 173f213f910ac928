"""`tower pending`, `tower approve RUN`, `tower reject RUN`: human decisions at gates; and
what the CLI's other sides of decisions share: ``--set`` edits, the policy check before a run
starts, the deployment `tower pending` and the inbox trust, how the terminal shows a proposal.

A decision goes to the run as the ``decide`` update, so the command prints the outcome the
run itself reported. Nothing is signed before the whole request is printed, by the library's
one rendering (``tower.contract.render``: plain text, never markup, wrapped to the terminal's
width; docs/approvals.md, "What the approver sees"). Making, signing and sending a decision
is the client's.
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
from temporalio.client import Client

from tower.activities.trust import TrustError, read_trust, trust_dir
from tower.cli import project
from tower.cli.errors import CliError
from tower.cli.output import json_option, print_json, say, tenant_option
from tower.client import DecisionRefused, connect
from tower.client import decide as send_decision
from tower.client import pending as pending_runs
from tower.client._decisions import NotConfirmed
from tower.client._decisions import prepare as prepare_decision
from tower.client._pending import Deployment
from tower.contract.decisions import GateRecord, Verdict, canonical_proposal
from tower.contract.render import MORE, WIDTH, fit, inert, render_proposal
from tower.core.gates import Outcome
from tower.core.policy import PolicyRefused, effective

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
    except PolicyRefused as exc:
        raise CliError(f"this input may not start a run: {exc}") from None


def deployment(tenant: str) -> Deployment:
    """The tenant's roster (its attesting worker keys), the project's agents and the
    deployment's task queues (TOWER_TASK_QUEUES, comma-separated; default the project's)."""
    from tower.cli.agents import agents

    try:
        roster = read_trust(trust_dir(), tenant).roster
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


def confirmer(verb: str, *, yes: bool, ask: bool, err: bool
              ) -> Callable[[GateRecord, str], bool]:
    """The ``confirm`` hook of ``tower.client.decide``: print the whole request and the
    proposal digest the decision will name (on stderr with ``err``: under --json stdout is
    data only), then sign only with ``yes`` or, when ``ask``, an explicit "y" typed on the
    terminal."""
    def confirm(request: GateRecord, digest: str) -> bool:
        rendered = render_proposal(canonical_proposal(request))
        out = sys.stderr if err else sys.stdout
        width = columns(out)
        lines = fit(f"You are about to {verb} this request (step {request.step} of run id "
                    f"{inert(request.run_id)}, role {inert(request.role)}):", GUTTER, width)
        lines += rendered.lines(indent="  ", width=width)
        lines += fit(f"  digest {digest}", GUTTER, width)
        print("\n".join(lines), file=out, flush=True)
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


@click.command("pending", help=(
    "List runs whose status is AWAITING_APPROVAL with the gate, role, expiry and proposal, "
    "all read from Temporal's visibility (search attributes and memo): no worker needed. "
    "Only requests the deployment's worker attested are listed (docs/approvals.md)."))
@click.option("--agent", help="only runs of this agent")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@json_option("a JSON array of pending requests")
@tenant_option
async def pending(agent: str | None, limit: int, as_json: bool) -> int:
    client = await connect()
    rows = await pending_requests(client, agent=agent, limit=limit)
    why = unattested(deployment(client.namespace), client.namespace)
    if why is not None:  # listing nothing would look like nothing waits
        print(f"warning: {why}", file=sys.stderr)
    if as_json:
        print_json(rows)
        return 0
    if not rows:
        print("(no runs awaiting approval)", flush=True)
    width = columns(sys.stdout)
    for row in rows:  # who must decide, until when, and the proposal
        head = (f"{inert(row['run'])} · agent {inert(row['agent'])} · step {row.get('step')} · "
                f"role {inert(row['role'])} · expires {inert(row.get('expires_at') or '?')}")
        lines = fit(head, GUTTER, width)  # the run's id is the requester's text
        lines += render_proposal(row["shown"]).lines(indent="  ", width=width)
        print("\n".join(lines), end="\n\n", flush=True)
    return 0


async def pending_requests(client: Client, *, agent: str | None = None,
                           limit: int = 50) -> list[dict[str, Any]]:
    """Runs waiting at a gate, from search attributes and the memo each run keeps: each
    request whole (``shown``, the canonical proposal) and ``hidden`` when its rendering
    shows hidden characters as escapes."""
    rows = []
    for w in await pending_runs(client, agent=agent, limit=limit,
                                deployment=deployment(client.namespace)):
        # Listed with a deployment: its memo was read, attested and shows the whole proposal.
        assert w.view is not None and w.view.shown
        rows.append({"run": w.run, "agent": w.agent, "step": w.step,
                     **w.view.model_dump(mode="json"),
                     "hidden": render_proposal(w.view.shown).hidden})
    return rows


def _decision_command(verdict: Verdict) -> click.Command:
    verb = verdict.value

    async def decide(run: str, gate: str | None, by: str, role: str | None, note: str,
                     yes: bool, decision_id: str | None, signal: bool, print_token: bool,
                     unsigned: bool, no_follow: bool, as_json: bool,
                     edits: tuple[str, ...] = ()) -> int:
        from tower.client.keys import check_name

        check_name(by)  # one line, before the server is asked anything
        client = await connect()
        quiet = as_json or print_token  # stdout is data only: the rest goes to stderr
        common: dict[str, Any] = dict(
            approver=by, role=role, gate=gate, note=note, edits=parse_edits(list(edits)),
            decision_id=decision_id, unsigned=unsigned,
            confirm=confirmer(verb, yes=yes, ask=verdict == Verdict.APPROVE, err=quiet))
        try:
            if print_token:  # the signed decision on stdout (one JSON line), nothing sent
                payload, _ = await prepare_decision(
                    client, run, verdict, say=lambda line: click.echo(line, err=True),
                    **common)
                print(json.dumps(payload), flush=True)
                return 0
            out = await send_decision(client, run, verdict, use_signal=signal, say=say,
                                      **common)
        except NotConfirmed as exc:
            print(f"not confirmed: {exc}", file=sys.stderr, flush=True)
            return 1
        except DecisionRefused as exc:
            code = exc.code.value if exc.code else None
            if as_json:
                print_json({"run": run, "accepted": False, "refused": exc.reason,
                            "code": code})
            else:
                print(f"refused: {exc.reason}\nrefusal code: {code or '(none)'}\n"
                      "the run's state is unchanged")
            return 1
        if as_json:
            print_json({"run": run, "accepted": None, "sent_as": "signal"} if out is None
                       else {"run": run, "accepted": True, **out.model_dump(mode="json")})
        elif out is not None:
            print_outcome(out)
            if not no_follow:
                from tower.cli.cmd_run import print_outcome as print_run_outcome
                from tower.cli.cmd_runs import run_state
                from tower.cli.live import follow

                status = await follow(client.get_workflow_handle(run), skip=out.requested_step)
                print_run_outcome(status, await run_state(client, run))
        return 0

    params = [
        click.argument("run", metavar="RUN"),
        click.option("--gate", help="gate id (default: the run's pending gate)"),
        click.option("--by", required=True, metavar="NAME",
                     help="who decides: signs with <config>/keys/NAME.jwk"),
        click.option("--role", help="the role you decide as (default: the gate's)"),
        click.option("--note", default="", help="why (shown to the run and in its log)"),
        click.option("--yes", "-y", is_flag=True, help=(
            "sign without asking (the request is still printed whole first); without it, "
            "approve asks y/N on a terminal and signs nothing elsewhere")),
        click.option("--decision-id", help="idempotency id (resending it changes nothing)"),
        click.option("--signal", is_flag=True, help="send as a signal, don't wait"),
        click.option("--print-token", is_flag=True, help=(
            "sign, print the decision (the decide update's input) on stdout and send nothing: "
            "any Temporal client sends it, e.g. `temporal workflow update execute "
            "--workflow-id RUN --name decide --input \"$(tower approve RUN --by NAME --yes "
            "--print-token)\"` (docs/approvals.md)")),
        click.option("--unsigned", is_flag=True,
                     help="send unsigned (only a development deployment accepts it)"),
        click.option("--no-follow", is_flag=True,
                     help="print the outcome only, not the run's next transitions"),
        json_option("the decision and the outcome the run reported, as JSON"),
        tenant_option,
    ]
    if verdict == Verdict.APPROVE:
        params.insert(5, click.option(
            "--set", "edits", multiple=True, metavar="FIELD=VALUE",
            help="change an editable field, e.g. --set amount_cents=50000"))
    command: Any = decide
    for param in reversed(params):
        command = param(command)
    return click.command(verb, help=(
        f"{verb.capitalize()} the pending approval of RUN and print the outcome the run "
        "reported. The whole request is printed before anything is signed. The decision is "
        "signed with your own key (`tower keys new NAME`), which the tenant's roster must "
        "list."))(command)


approve = _decision_command(Verdict.APPROVE)
reject = _decision_command(Verdict.REJECT)


def print_outcome(out: Outcome) -> None:
    dup = " (duplicate: already applied, nothing changed)" if out.duplicate else ""
    print(f"outcome: gate {out.gate} {out.result.value}{dup}"
          + (f" — {out.reason}" if out.reason else ""))
    print(f"run: {out.status} at {out.node}, step {out.step}")

"""`tower pending`, `tower approve RUN`, `tower reject RUN`: human decisions at gates.

A decision goes to the run as the ``decide`` update, so the command prints the outcome the
run itself reported (or why it refused the decision, which then changed nothing). Every
proposal is printed whole, and a decision is printed before it is signed: `tower approve`
then asks (y/N) on a terminal, ``--yes`` signs what it printed without asking, and nothing
else signs.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from temporalio.client import Client

from tower.cli.approvals import confirmer, deployment, parse_edits, print_pending, unattested
from tower.cli.cmd_run import print_outcome as print_run_outcome
from tower.cli.cmd_runs import run_state
from tower.cli.live import follow
from tower.cli.output import json_option, print_json, say, tenant_option
from tower.client import DecisionRefused, connect
from tower.client import decide as send_decision
from tower.client import pending as pending_runs
from tower.client._decisions import NotConfirmed
from tower.client._decisions import prepare as prepare_decision
from tower.contract.decisions import Verdict
from tower.contract.render import render_proposal
from tower.core.gates import Outcome

__all__ = ["approve", "pending", "pending_requests", "reject", "send_decision"]


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
    for row in rows:
        print_pending(row)
    return 0


async def pending_requests(client: Client, *, agent: str | None = None,
                           limit: int = 50) -> list[dict[str, Any]]:
    """Runs waiting at a gate, from search attributes and the memo each run keeps: each
    request whole (``shown``, the canonical proposal) and ``hidden`` when its rendering
    shows hidden characters as escapes."""
    rows = []
    for w in await pending_runs(client, agent=agent, limit=limit,
                                deployment=deployment(client.namespace)):
        if w.view is None:  # a memo this process cannot open: what the graph says
            memo = _gate_from_graph(w.agent, w.node)
        else:
            memo = w.view.model_dump(mode="json")
            memo["hidden"] = bool(w.view.shown) and render_proposal(w.view.shown).hidden
        rows.append({"run": w.run, "agent": w.agent, "step": w.step, **memo})
    return rows


def _gate_from_graph(agent: str, node: str) -> dict[str, Any]:
    from tower.cli.agents import agents

    try:
        cls = agents().get(agent)
    except ValueError:  # run outside the project: the memo's own words only
        cls = None
    gate = cls.machine.gates.get(node) if cls else None
    return {"gate": gate.name if gate else "?", "node": node,
            "when": gate.when if gate else "?", "role": gate.role if gate else "?",
            "editable": list(gate.editable) if gate else [], "expires_at": None,
            "requested_at": None, "proposal": None}


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

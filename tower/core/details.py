"""The Web UI's "current details" of a run: the story so far, as Markdown. Pure: a
function of the machine, the state and the last move, the same on every replay.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import datetime

from tower.contract.decisions import GateRecord, GateStatus, canonical_proposal
from tower.contract.render import escape, inert, render_proposal
from tower.core.engine import Transition
from tower.core.gates import canonical_time, pending_record
from tower.core.graph import TERMINALS, Machine
from tower.core.state import AgentState


def render_details(machine: Machine, state: AgentState, last: Transition | None = None,
                   run_id: str = "RUN", log: Sequence[Transition] = ()) -> str:
    """The details; ``log`` dates the decisions. Every string the run carries is inert:
    escaped, in a code span or fence, so no Markdown in it becomes structure."""
    ended = state.node in TERMINALS
    lines = [
        f"**{machine.name}** · {'ended at' if ended else 'state'} `{state.node}` · "
        f"{state.status.value} · step {state.step}"]
    if last is not None:
        lines += ["", f"last move: {last.source} → {last.target} ({span(last.reason)})"]
    pending = pending_record(state)
    if pending is not None:
        lines += ["", *_pending(pending, run_id)]
    decided = [r for r in state.approvals if r.status != GateStatus.PENDING]
    if decided:
        at = {t.step: t.at for t in log}
        lines += ["", "decisions:", "", *(_decided(r, at.get(r.step + 1)) for r in decided)]
    if ended and (said := reply(state)):
        lines += ["", "reply:", *fenced(escape(said, multiline=True)[0])]
    usage = state.usage
    lines += [
        "", f"budget used: {budget_used(machine, state)}",
        f"model usage: {usage.calls} call{'' if usage.calls == 1 else 's'} · "
        f"{usage.prompt_tokens} prompt + {usage.completion_tokens} completion tokens · "
        f"${usage.cost_usd:.4f}"]
    if state.errors:
        lines += ["", f"last error: {span(state.errors[-1])}"]
    if state.unsigned_decisions:
        lines += ["", "**UNSIGNED decisions accepted**: this deployment's policy allows them "
                      "(a development setting)"]
    return "\n".join(lines)


def budget_used(machine: Machine, state: AgentState) -> str:
    """e.g. ``steps 3 of 10 · reason: 2 of 5 visits`` (no slashes: the Web UI's Markdown
    turns ``2/5`` into a fraction)."""
    budget = machine.budget
    if budget is None:
        return f"steps {state.step} (no budget)"
    parts = [f"steps {state.step}" + (f" of {budget.max_steps}" if budget.max_steps else "")]
    parts += [f"{node}: {state.visits.get(node, 0)} of {limit} visits"
              for node, limit in budget.max_visits.items()]
    if budget.max_tokens is not None:
        parts.append(f"{state.usage.tokens} of {budget.max_tokens} tokens")
    if budget.max_cost_usd is not None:
        parts.append(f"${state.usage.cost_usd:.4f} of ${budget.max_cost_usd:g}")
    return " · ".join(parts)


def _pending(record: GateRecord, run_id: str) -> list[str]:
    # The proposal as every surface shows it (tower.contract.render): whole and inert, in
    # a code fence longer than any run of backticks in it, so nothing in it is Markdown.
    rendered = render_proposal(canonical_proposal(record))
    lines = [
        f"**awaiting approval**: gate `{record.gate}` ({record.when} `{record.node}`) needs "
        f"role **{record.role}**, expires {canonical_time(record.expires_at)}",
        "", *fenced(rendered.text())]
    if rendered.hidden:
        lines += ["", "**the proposal holds hidden characters**, shown as escapes"]
    approve = f"tower approve {run_id} --gate {record.gate} --by NAME --role {record.role}"
    return [*lines, "", f"{span(approve)} (or `tower reject ...`)"]


def _decided(record: GateRecord, at: datetime | None) -> str:
    """One decided request: who, what, and when (its time when this run's log holds it)."""
    line = f"- gate `{record.gate}` ({record.when} `{record.node}`): **{record.status.value}**"
    decision = record.decision
    if decision is not None:
        signed = "signed" if decision.signed else "UNSIGNED"
        line += f" by {span(decision.approver)} (role {span(decision.role)}, {signed})"
    line += f" at step {record.step + 1}"
    if at is not None:
        line += f", {canonical_time(at)}"
    if decision is not None and decision.note:
        line += f"; note {span(decision.note)}"
    if decision is not None and decision.edits:
        line += f"; edits {span(json.dumps(decision.edits, sort_keys=True))}"
    if record.reason:
        line += f"; {span(record.reason)}"
    return line


def reply(state: AgentState) -> str:
    """What the run answered: its ``reply`` or ``answer`` field, else its last assistant message."""
    for field in ("reply", "answer"):
        own = getattr(state, field, None)
        if isinstance(own, str) and own:
            return own
    said = [m.content for m in state.messages if m.role == "assistant" and m.content]
    return said[-1] if said else ""


def span(text: str) -> str:
    """``text`` as one inert line in a Markdown code span longer than any backtick run in it."""
    shown = inert(text)
    ticks = "`" * (1 + _longest_backtick_run(shown))
    return f"{ticks} {shown} {ticks}"


def fenced(body: str) -> list[str]:
    """``body`` (already escaped) in a code fence longer than any run of backticks in it."""
    fence = "`" * max(3, 1 + _longest_backtick_run(body))
    return [f"{fence}text", body, fence]


_BACKTICKS = re.compile("`+")


def _longest_backtick_run(text: str) -> int:
    # Most texts (every move's reason) hold no backtick: no regex search for them.
    if "`" not in text:
        return 0
    return max(len(run) for run in _BACKTICKS.findall(text))


def start_metadata(machine: Machine, run_id: str) -> tuple[str, str]:
    """The Web UI's summary and static details of a run of ``machine`` (kept by the server
    after the run closes): the agent, its nodes and gates, and the commands that read it."""
    summary = (f"Tower agent {machine.name}: its node, decisions and reply are in Current "
               "Details (User Metadata)")
    lines = [f"**{machine.name}**, a Tower state machine: nodes "
             + ", ".join(f"`{node}`" for node in machine.nodes) + " (then `DONE` or `FAILED`)",
             *([""] if machine.gates else [])]
    for gate in machine.gates.values():
        lines.append(f"- gate `{gate.name}` {gate.when} `{gate.node}`: role **{gate.role}** "
                     "decides")
    lines += ["", f"{span(f'tower state {run_id}')} where it is · "
                  f"{span(f'tower inspect {run_id}')} its moves and decisions"]
    return summary, "\n".join(lines)

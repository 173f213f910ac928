"""What the Temporal Web UI shows as a run's "current details": the story so far.

Pure: a function of the machine, the state and the last transition, so the text
is the same on every replay and can be unit-tested without a server. The Web UI
renders it as Markdown (in a frame of its own, on the run's "User Metadata" tab).
"""

from __future__ import annotations

import re

from tower.contract.decisions import GateRecord, canonical_proposal
from tower.contract.render import render_proposal
from tower.core.engine import Transition
from tower.core.gates import canonical_time, pending_record
from tower.core.graph import Machine
from tower.core.state import AgentState


def render_details(machine: Machine, state: AgentState, last: Transition | None = None,
                   run_id: str = "RUN") -> str:
    lines = [
        f"**{machine.name}** · state `{state.node}` · {state.status.value} · step {state.step}"]
    if last is not None:
        lines += ["", f"last move: {last.source} → {last.target} ({last.reason})"]
    pending = pending_record(state)
    if pending is not None:
        lines += ["", *_pending(pending, run_id)]
    usage = state.usage
    lines += [
        "", f"budget used: {budget_used(machine, state)}",
        f"model usage: {usage.calls} call{'' if usage.calls == 1 else 's'} · "
        f"{usage.prompt_tokens} prompt + {usage.completion_tokens} completion tokens · "
        f"${usage.cost_usd:.4f}"]
    if state.errors:
        lines += ["", f"last error: {state.errors[-1]}"]
    if state.unsigned_decisions:
        lines += ["", "**UNSIGNED decisions accepted**: this deployment's policy allows them "
                      "(a development setting)"]
    return "\n".join(lines)


def budget_used(machine: Machine, state: AgentState) -> str:
    """e.g. ``steps 3 of 10 · reason: 2 of 5 visits · 800 of 4000 tokens`` (no slashes:
    the Web UI's Markdown turns ``2/5`` into a fraction)."""
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
    body = rendered.text()
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall("`+", body)), default=0))
    lines = [
        f"**awaiting approval**: gate `{record.gate}` ({record.when} `{record.node}`) needs "
        f"role **{record.role}**, expires {canonical_time(record.expires_at)}",
        "", f"{fence}text", body, fence]
    if rendered.hidden:
        lines += ["", "**the proposal holds hidden characters**, shown as escapes"]
    return lines + [
        "", f"`tower approve {run_id} --gate {record.gate} --by NAME --role {record.role}` "
            "(or `tower reject ...`)",
    ]

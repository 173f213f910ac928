"""migration — approval for destructive changes.

analyze → apply → report → DONE. ``analyze`` dry-runs the script (in a transaction that
is rolled back) and asks the model whether it is destructive; a deterministic SQL check
can only add to the model's answer, never clear it. A destructive migration waits at a
gate before ``apply`` for a DBA. On approval the gate re-checks that the schema is still
the one analysed (the approval may come hours later); if not, the run analyses again.
``apply`` runs every statement in one transaction; on rejection nothing changes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from activities.scripted import migration as scripted
from activities.tools import migrations
from tower import (
    DONE,
    AgentState,
    AgentWorkflow,
    Gate,
    GateStatus,
    Graph,
    Message,
    NodeContext,
    NodeFailed,
    agent,
)

DAY = 24 * 3600


class MigrationRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    database: str = Field(pattern=r"^[a-z][a-z0-9_]{0,39}$", examples=["shop"],
                          description="a database under <tools dir>/databases/")
    script: str = Field(min_length=1, max_length=20_000,
                        examples=["ALTER TABLE customers DROP COLUMN fax;"])
    review_timeout_seconds: int = Field(default=DAY, ge=1, le=30 * DAY)


class Assessment(BaseModel):
    destructive: bool
    summary: str = Field(min_length=1, max_length=1000)


class MigrationState(AgentState):
    database: str
    script: str
    review_timeout_seconds: int
    valid: bool = False
    destructive: bool = False
    findings: list[str] = Field(default_factory=list)
    summary: str = ""
    fingerprint: str = ""
    error: str = ""
    applied: bool = False
    report: str = ""


ANALYZE_PROMPT = (
    "You review SQL migrations. Given the script and a dry run's findings, reply with JSON "
    "{\"destructive\": true|false, \"summary\": \"...\"}; destructive means it can lose data "
    "(DROP, column removal, DELETE, data-losing ALTER)."
)


async def analyze(ctx: NodeContext, state: MigrationState) -> dict[str, object]:
    """Dry-run the script, then let the model assess it; the SQL check has the last word."""
    check = await ctx.tool(migrations.inspect_migration, {"database": state.database,
                                                 "script": state.script})
    msg = Message(role="tool", name="inspect_migration", content=json.dumps(check, sort_keys=True))
    if not check.get("ok"):
        return {"valid": False, "error": check.get("error", "inspection failed"),
                "messages": [msg]}
    answer = await ctx.ask([*state.messages, msg], schema=Assessment)
    assert answer.parsed is not None
    return {"valid": True, "error": "", "destructive": answer.parsed.destructive or
            bool(check["findings"]), "findings": check["findings"],
            "summary": answer.parsed.summary, "fingerprint": check["fingerprint"],
            "messages": [msg, Message(role="assistant", content=answer.text or "")]}


async def apply(ctx: NodeContext, state: MigrationState) -> dict[str, object]:
    """Apply in one transaction, only on the schema that was analysed."""
    # The tool applies a destructive script only with the approval, and only that script.
    result = await ctx.tool(migrations.apply_migration, {
        "database": state.database, "script": state.script,
        "expected_fingerprint": state.fingerprint})
    if not result.get("applied"):
        raise NodeFailed(f"apply: {result.get('error', 'not applied')}")
    return {"applied": True, "messages": [
        Message(role="tool", name="apply_migration", content=json.dumps(result, sort_keys=True))]}


async def report(ctx: NodeContext, state: MigrationState) -> dict[str, object]:
    """Say what happened to the database, in one line."""
    last = state.approvals[-1] if state.approvals else None
    if state.applied:
        text = f"Applied the migration to {state.database}."
    elif not state.valid:
        text = f"Not applied: the migration does not run on {state.database}: {state.error}"
    elif last is not None and last.status == GateStatus.REJECTED and last.decision:
        text = (f"Not applied: rejected by {last.decision.approver}"
                f"{': ' + last.decision.note if last.decision.note else ''}. Nothing changed.")
    elif last is not None and last.status == GateStatus.EXPIRED:
        text = "Not applied: no decision before the request expired. Nothing changed."
    else:
        text = "Not applied: the schema kept changing under the review. Nothing changed."
    return {"report": text, "messages": [Message(role="assistant", content=text)]}


def proposal(state: MigrationState) -> Mapping[str, Any]:
    # One finding per item: what the DBA signs names every statement that loses data.
    return {"action": "apply_migration", "database": state.database,
            "findings": list(state.findings) or [state.summary], "script": state.script}


async def schema_unchanged(ctx: NodeContext, state: MigrationState) -> str | None:
    result = await ctx.tool(migrations.schema_fingerprint, {"database": state.database})
    now = result.get("fingerprint")
    if now != state.fingerprint:
        return (f"the schema of {state.database} changed since analysis "
                f"({state.fingerprint} -> {now})")
    return None


def after_analyze(state: MigrationState) -> str:
    return "apply" if state.valid else "report"


GRAPH = (
    Graph("migration", MigrationState)
    .node("analyze", analyze, prompt=ANALYZE_PROMPT, tools=[migrations.inspect_migration])
    .node("apply", apply, tools=[migrations.apply_migration, migrations.schema_fingerprint])
    .node("report", report)
    .entry("analyze")
    .route("analyze", after_analyze, {"apply": "runs", "report": "does not run"})
    .gate("apply", Gate(
        name="dba_review", role="dba",
        timeout=lambda s: timedelta(seconds=s.review_timeout_seconds),
        on_reject="report", on_timeout="report", applies=lambda s: s.destructive,
        proposal=proposal, recheck=schema_unchanged, on_stale="analyze"))
    .edge("apply", "report")
    .edge("report", DONE)
    .budget(escalate_to="report", max_visits={"analyze": 3})
    .compile()
)


@agent(GRAPH, scripts=scripted.SCRIPTS)
class MigrationAgent(AgentWorkflow):
    """Applies a SQL migration; destructive ones wait for a DBA's signed decision."""

    Input = MigrationRequest

    def start(self, request: MigrationRequest) -> MigrationState:
        return MigrationState(
            messages=[Message(role="user", content=f"Migration for {request.database}:\n"
                              f"{request.script}")],
            database=request.database, script=request.script,
            review_timeout_seconds=request.review_timeout_seconds)

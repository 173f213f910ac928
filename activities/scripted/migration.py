"""Scripts for the migration agent: assess a migration from the dry run's findings."""

from __future__ import annotations

import json

from activities.scripted import tool_results
from tower.testing import ModelRequest, Script


def analyze(request: ModelRequest) -> str:
    checks = tool_results(request, "inspect_migration")
    check = checks[-1] if checks else {}
    findings = check.get("findings", [])
    n = check.get("statements", 0)
    if findings:
        summary = f"{n} statement(s); can lose data: " + "; ".join(findings)
    else:
        summary = f"{n} statement(s), additive only: no data can be lost."
    return json.dumps({"destructive": bool(findings), "summary": summary})


# node -> script; the agent's file names the agent (@agent(GRAPH, scripts=SCRIPTS)).
SCRIPTS: dict[str, Script] = {"analyze": analyze}

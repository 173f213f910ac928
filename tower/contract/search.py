"""The search attributes every run keeps current. Register each one with the server
(`tower setup` does, through the operator API): an unknown attribute makes the workflow
task fail and retry forever."""

from __future__ import annotations

from typing import Any

from temporalio.common import SearchAttributeKey

AGENT_NAME = SearchAttributeKey.for_keyword("AgentName")
AGENT_NODE = SearchAttributeKey.for_keyword("AgentNode")
AGENT_STATUS = SearchAttributeKey.for_keyword("AgentStatus")
AGENT_STEP = SearchAttributeKey.for_int("AgentStep")
# What the run has spent on models so far: find expensive runs with a visibility query.
AGENT_COST_USD = SearchAttributeKey.for_float("AgentCostUsd")
AGENT_TOKENS = SearchAttributeKey.for_int("AgentTokens")
# The latest error of a run (truncated): why a FAILED run failed, searchable.
AGENT_ERROR = SearchAttributeKey.for_keyword("AgentError")

# Memo key of a run waiting at a gate: what approvers see of the pending request
# (tower.contract.pending.PendingView), so `tower pending` and the inbox list it from
# visibility alone, with no worker answering a query.
PENDING_MEMO = "tower_pending_gate"
# Set (true) on a run whose deployment accepts UNSIGNED decisions: a development setting.
UNSIGNED_DECISIONS = SearchAttributeKey.for_bool("TowerUnsignedDecisions")

# The role a run waiting at a gate needs ("" once decided): an approver's inbox lists
# the runs their roles may decide with one visibility query.
AGENT_GATE_ROLE = SearchAttributeKey.for_keyword("AgentGateRole")

ALL: list[SearchAttributeKey[Any]] = [
    AGENT_NAME, AGENT_NODE, AGENT_STATUS, AGENT_STEP, AGENT_COST_USD, AGENT_TOKENS, AGENT_ERROR,
    AGENT_GATE_ROLE, UNSIGNED_DECISIONS]


"""The search attributes every run keeps current. Register each one with the server
(``tower dev`` and the test environment do): an unknown attribute makes the workflow
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

ALL: list[SearchAttributeKey[Any]] = [
    AGENT_NAME, AGENT_NODE, AGENT_STATUS, AGENT_STEP, AGENT_COST_USD, AGENT_TOKENS, AGENT_ERROR]


def dev_server_flags() -> list[str]:
    """``--search-attribute`` flags for ``temporal server start-dev``."""
    kinds = {"KEYWORD": "Keyword", "INT": "Int", "TEXT": "Text", "BOOL": "Bool",
             "DOUBLE": "Double"}
    return [f"--search-attribute={k.name}={kinds[k.indexed_value_type.name]}" for k in ALL]

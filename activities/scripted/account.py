"""Scripts for the account agent: look the account up, then answer from what was read.

An account that does not exist makes this model look again and again, as a weak
model would: the agent's loop budget is what stops it.
"""

from __future__ import annotations

import json

from activities.scripted import find_id, first_user_text, tool_results
from tower import ToolCallRequest
from tower.testing import ModelRequest, Script


def reason(request: ModelRequest) -> str | ToolCallRequest:
    account_id = find_id(first_user_text(request), "ACC") or "ACC-0000"
    found = [r["account"] for r in tool_results(request, "lookup_account") if "account" in r]
    if not found:
        return ToolCallRequest(name="lookup_account", arguments={"account_id": account_id})
    acc = found[-1]
    balance = acc["balance_cents"] / 100
    answer = (f"Account {acc['id']} ({acc['name']}) is {acc['status']} on the {acc['plan']} "
              f"plan with a balance of ${balance:,.2f}.")
    return json.dumps({"answer": answer})


# node -> script; the agent's file names the agent (@agent(GRAPH, scripts=SCRIPTS)).
SCRIPTS: dict[str, Script] = {"reason": reason}

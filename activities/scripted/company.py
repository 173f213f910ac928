"""Scripts for the company child agent. Names steer failures so the fan-out policies
can be shown offline: "Fail..." always answers badly, "Flaky..." only on attempt 0."""

from __future__ import annotations

import json
import re

from activities.scripted import first_user_text
from tower.testing import ModelRequest, Script


def profile(request: ModelRequest) -> str:
    text = first_user_text(request)
    match = re.search(r"company (.+) \(attempt (\d+)\)", text)
    name, attempt = (match.group(1), int(match.group(2))) if match else ("?", 0)
    if name.lower().startswith("fail") or (name.lower().startswith("flaky") and attempt == 0):
        return "I'd rather not say."  # not JSON: the schema check refuses it
    return json.dumps({"summary": f"{name} is a company of {len(name)} letters, profiled "
                                  f"by the scripted model on attempt {attempt}."})


# node -> script; the agent's file names the agent (@agent(GRAPH, scripts=SCRIPTS)).
SCRIPTS: dict[str, Script] = {"profile": profile}

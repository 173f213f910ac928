"""Scripts for the chat agent: a deterministic conversationalist and summariser.

Replies name how many messages the model was shown, so a test (and the bench) can
see that the context stays bounded however long the thread is.
"""

from __future__ import annotations

import json

from tower import ToolCallRequest
from tower.testing import ModelRequest, Script

SUMMARY_CHARS = 600


def respond(request: ModelRequest) -> str | ToolCallRequest:
    last_user = max((i for i, m in enumerate(request.messages) if m.role == "user"), default=-1)
    if last_user < 0:
        return "Hello! What can I do for you?"
    text = request.messages[last_user].content
    results = [m for m in request.messages[last_user + 1:] if m.role == "tool"]
    if text.lower().startswith("search docs") and not results:
        return ToolCallRequest(name="search_docs", arguments={"query": text[11:].strip()[:200]
                                                              or "docs"})
    if results:
        hits = json.loads(results[-1].content).get("results", [])
        found = f"\"{hits[0]['title']}\"" if hits else "nothing"
        return f"The docs have {found} on that."
    shown = len(request.messages)
    return f"You said \u201c{text[:60]}\u201d. (I was shown {shown} messages.)"


def reduce(request: ModelRequest) -> str:
    earlier = next((m.content for m in request.messages
                    if m.role == "assistant" and m.content.startswith("Summary:")), "")
    said = [m.content[:40] for m in request.messages[:-1] if m.role == "user"]
    summary = f"Summary: {earlier[9:]} | user said: {'; '.join(said)}"
    # A real summary is bounded by the prompt; this one by a cut, keeping the newest part.
    return "Summary: " + summary[-(SUMMARY_CHARS - 9):] if len(summary) > SUMMARY_CHARS \
        else summary


# node -> script; the agent's file names the agent (@agent(GRAPH, scripts=SCRIPTS)).
SCRIPTS: dict[str, Script] = {"respond": respond, "reduce": reduce}

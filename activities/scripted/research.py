"""Scripts for the research agent: an *eager* model that signals "done" early.

It signals as soon as it has something (one source, a first short draft) and does
more work only when code says "Not yet" — so the three control modes visibly differ.
"""

from __future__ import annotations

import re

from activities.scripted import first_user_text
from tower import ToolCallRequest
from tower.testing import ModelRequest, Script

ADVANCE = "advance_to_next_step"
CLOSING = (
    "In practice these ideas reinforce each other. A run that records every step can be "
    "resumed after a crash, audited after the fact and replayed while debugging, and a "
    "machine whose transitions are owned by code can be checked before it ever runs. The "
    "model still does the reasoning inside each state; what changes is that its output is "
    "validated, its side effects happen once, and every decision leaves a trace."
)


def _field(text: str, pattern: str) -> str:
    match = re.search(pattern, text)
    return match.group(1) if match else ""


def research(request: ModelRequest) -> ToolCallRequest:
    text = first_user_text(request)
    topic = _field(text, r"Topic: (.+)")
    gathered = int(_field(text, r"Sources gathered: (\d+)") or 0)
    if gathered == 0 or "Not yet" in text:
        page = int(_field(text, r"Next page: (\d+)") or 1)
        return ToolCallRequest(name="search_sources", arguments={"query": topic, "page": page})
    titles = _field(text, r"Sources gathered: \d+ \((.*)\)")
    return ToolCallRequest(name=ADVANCE, arguments={
        "summary": f"{gathered} source(s) on {topic}: {titles}"})


def draft(request: ModelRequest) -> str | ToolCallRequest:
    text = first_user_text(request)
    topic = _field(text, r"Topic: (.+)")
    words = int(_field(text, r"Current draft \((\d+) words\)") or 0)
    titles = re.findall(r"^- ([^:]+):", text, flags=re.MULTILINE)
    summaries = re.findall(r"^- [^:]+: (.+)$", text, flags=re.MULTILINE)
    if words == 0:
        return (f"{topic.capitalize()}: a first look. This note draws on "
                f"{', '.join(titles) or 'no sources yet'}. {summaries[0] if summaries else ''}"
                ).strip()
    if "Not yet" in text:
        return f"{topic.capitalize()}.\n\n" + " ".join(summaries) + "\n\n" + CLOSING
    return ToolCallRequest(name=ADVANCE, arguments={
        "summary": f"A {words}-word draft on {topic} from {len(titles)} source(s)."})


# node -> script; the agent's file names the agent (@agent(GRAPH, scripts=SCRIPTS)).
SCRIPTS: dict[str, Script] = {
    "research": research,
    "draft": draft,
}

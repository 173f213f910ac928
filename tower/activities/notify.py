"""What ``notify_gate`` (tower/activities/trust.py) posts to the tenant's webhook to tell
approvers that a run waits for them: ``slack`` (a message linking to the inbox) or ``json``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from tower.contract.notify import GateNotice, NotifyPolicy
from tower.contract.render import ATOM, WARNING, Rendered, escape, render_proposal

SLACK_TEXT = 2900  # characters per section block (Slack takes 3,000)
SLACK_BLOCKS = 45  # of Slack's 50 blocks per message, for the proposal


def message(policy: NotifyPolicy, notice: GateNotice) -> dict[str, Any]:
    """The body to post, in the policy's format; the proposal whole and inert."""
    url = (f"{policy.inbox_url.rstrip('/')}/runs/{quote(notice.run, safe='')}"
           if policy.inbox_url else None)
    # The proposal as every surface shows it (tower.contract.render), whole.
    proposal = render_proposal(notice.shown or {"gate": notice.gate, "node": notice.node,
                                                "when": "?", "proposal": notice.proposal})
    if policy.format == "json":
        return {"event": "gate.waiting", **notice.model_dump(mode="json"), "link": url,
                "rendered": proposal.text(), "hidden": proposal.hidden}
    text = (f"{_slack(notice.agent)} run {_slack(notice.run)} waits at gate "
            f"{_slack(notice.gate)}: a {_slack(notice.role)} must decide by "
            f"{notice.expires_at:%Y-%m-%d %H:%M} UTC.")
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "plain_text", "text": text, "emoji": False}}]
    shown = _proposal_blocks(proposal)
    if len(shown) <= SLACK_BLOCKS:
        blocks += shown
    else:  # never a cut proposal: none, and where to read it whole
        size = sum(len(e["text"]) for b in shown for part in b["elements"]
                   for e in part["elements"])
        blocks.append({"type": "section", "text": {"type": "plain_text", "emoji": False,
                       "text": f"The proposal is {size:,} characters, more than one "
                               "message holds: read it whole in the inbox."}})
    if proposal.hidden:
        blocks.append({"type": "section", "text": {"type": "plain_text", "emoji": False,
                                                   "text": f"WARNING: {WARNING}"}})
    if url:
        blocks.append({"type": "actions", "elements": [{
            "type": "button", "text": {"type": "plain_text", "text": "Decide in the inbox"},
            "url": url}]})
    return {"text": f"{text} {url or ''}".strip(), "mrkdwn": False, "blocks": blocks}


def _proposal_blocks(proposal: Rendered) -> list[dict[str, Any]]:
    """The proposal as Slack ``rich_text``: names as plain text, each value in a
    ``rich_text_quote`` whose bar marks every row Slack wraps it into (a sender cannot know
    Slack's width, so the layout marks a value's rows, not characters)."""
    # All of it rendered (already inert); Slack's entities for &, <, > on top.
    parts = [("section", _entities(f"{proposal.heading}\nproposal:"))]
    for f in proposal.fields:
        parts.append(("section", _entities(f"{f.name}:" + (f"  ({f.note})" if f.note else ""))))
        parts += [("quote", chunk) for chunk in _chunks(f.text)]
    rest = [f"editable: {', '.join(proposal.editable) or '-'}",
            *(f"limit {limit}" for limit in proposal.limits)]
    parts.append(("section", _entities("\n".join(rest))))
    blocks: list[dict[str, Any]] = []
    size = SLACK_TEXT
    for kind, text in parts:
        if size + len(text) > SLACK_TEXT:
            blocks.append({"type": "rich_text", "elements": []})
            size = 0
        size += len(text)
        blocks[-1]["elements"].append({"type": f"rich_text_{kind}",
                                       "elements": [{"type": "text", "text": text}]})
    return blocks


def _chunks(text: str) -> list[str]:
    """``text`` as Slack's entities, in pieces of at most SLACK_TEXT characters, never cut
    inside an entity or an escape; never empty (Slack refuses an empty text)."""
    chunks, chunk = [], ""
    for atom in ATOM.findall(text):
        shown = _entities(atom)
        if len(chunk) + len(shown) > SLACK_TEXT:
            chunks.append(chunk)
            chunk = ""
        chunk += shown
    return [*chunks, chunk or " "]


def _slack(text: str) -> str:
    """A run's name inert in a Slack message: no control character, no link or mention."""
    return _entities(escape(text)[0])


def _entities(text: str) -> str:
    """``&``, ``<``, ``>`` as entities (no ``<!channel>``, no link)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

"""Tell approvers that a run waits for them: the ``notify_gate`` activity.

The webhook is the tenant's own file (``<TOWER_TRUST_DIR>/<tenant>/notify.json``), read at
send time: a webhook URL is often a secret, so it never enters a run (the policy does).
Formats: ``slack`` (a message linking to the inbox) or ``json``. A 5xx, 429 or timeout is
retried; other 4xx answers are final.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

from pydantic import ValidationError
from temporalio import activity

from tower.contract.failures import Code, TowerError, failure
from tower.contract.notify import GateNotice, NotifyPolicy
from tower.contract.render import ATOM, WARNING, Rendered, escape, render_proposal

DEFAULT_TRUST_DIR = Path(".tower") / "trust"
TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
TIMEOUT_SECONDS = 10.0
NOTIFY_FILE = "notify.json"
SLACK_TEXT = 2900  # characters per section block (Slack takes 3,000)
SLACK_BLOCKS = 45  # of Slack's 50 blocks per message, for the proposal


def notify_policy(root: Path, tenant: str) -> NotifyPolicy | None:
    """The tenant's webhook, or None when it has none."""
    if not TENANT.match(tenant) or tenant in (".", ".."):
        raise failure(TowerError(f"invalid tenant name {tenant!r}",
                                 code=Code.BAD_NOTIFY_SETTINGS))
    path = root / tenant / NOTIFY_FILE
    if not path.is_file():
        return None
    try:
        return NotifyPolicy.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'file'}: {e['msg']}"
                             for e in exc.errors()[:3])
        raise failure(TowerError(f"{path} is invalid: {problems}",
                                 code=Code.BAD_NOTIFY_SETTINGS)) from None


def link(policy: NotifyPolicy, notice: GateNotice) -> str | None:
    if not policy.inbox_url:
        return None
    return f"{policy.inbox_url.rstrip('/')}/runs/{quote(notice.run, safe='')}"


def rendered(notice: GateNotice) -> Rendered:
    """The notice's proposal as every surface shows it (tower.contract.render), whole."""
    shown = notice.shown or {"gate": notice.gate, "node": notice.node, "when": "?",
                             "proposal": notice.proposal}
    return render_proposal(shown)


def message(policy: NotifyPolicy, notice: GateNotice) -> dict[str, Any]:
    """The body to post, in the policy's format; the proposal whole and inert."""
    url = link(policy, notice)
    proposal = rendered(notice)
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


class Notifier:
    """Hosts ``notify_gate`` on one trust directory."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root or os.environ.get("TOWER_TRUST_DIR") or DEFAULT_TRUST_DIR)

    @activity.defn
    def notify_gate(self, notice: GateNotice) -> str:
        policy = notify_policy(self.root, notice.tenant)
        if policy is None:
            return f"no {NOTIFY_FILE} for tenant {notice.tenant}: nobody notified"
        import httpx  # here: a worker that never notifies is spared its start-up (and rich's)

        try:
            reply = httpx.post(policy.url, json=message(policy, notice), timeout=TIMEOUT_SECONDS)
        except httpx.HTTPError as exc:
            raise failure(TowerError(f"webhook unreachable: {type(exc).__name__}",
                                     code=Code.WEBHOOK_UNREACHABLE)) from None
        if reply.status_code == 429 or reply.status_code >= 500:
            raise failure(TowerError(f"webhook answered {reply.status_code}; retrying",
                                     code=Code.WEBHOOK_UNREACHABLE))
        if reply.status_code >= 400:
            raise failure(TowerError(f"webhook refused the notice: {reply.status_code}",
                                     code=Code.WEBHOOK_REFUSED))
        return f"notified {policy.format} webhook ({reply.status_code})"

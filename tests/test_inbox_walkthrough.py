"""docs/inbox.md's walkthrough, followed in headless Chromium: each step's quoted page text
(its *italics*, and the bold words and `code` values that name what the page shows) must
be on the page that step shows, and the screenshots the page embeds are taken here, into
docs/, from this run. A step the doc describes that the page does not show fails the test
with the step and the phrase; so does a screenshot the doc names that no step takes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from gatekit import make_shop
from headless import Browser, sync
from inboxkit import inbox, park_refund
from temporalio.client import Client
from test_inbox_browser import park_migration, sign_in

from tower.activities.model import ModelSettings
from worker import build_worker

pytestmark = pytest.mark.browser

DOCS = Path(__file__).resolve().parent.parent / "docs"
WHEN = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def walkthrough() -> tuple[list[str], list[str]]:
    """The walkthrough's numbered steps (text, one per step) and the screenshots it embeds."""
    doc = (DOCS / "inbox.md").read_text()
    section = doc.split("## A walkthrough", 1)[1].split("\n## ", 1)[0]
    steps = [s.strip() for s in re.split(r"^\d+\. ", section, flags=re.M)[1:]]
    images = re.findall(r"!\[[^]]*\]\(([^)]+\.png)\)", doc)
    return steps, images


def shown(step: str) -> list[str]:
    """What ``step`` says the page shows: its italics, its bold words but the first (the
    step's name), and its `code` values that hold an amount."""
    bold = re.findall(r"\*\*([^*]+)\*\*", step)
    italic = re.findall(r"(?<!\*)\*([^*]+)\*(?!\*)", step)
    code = [c for c in re.findall(r"`([^`]+)`", step) if "$" in c and ":" in c]
    return [*bold[1:], *italic, *code]


def pattern(phrase: str) -> re.Pattern[str]:
    """A phrase as the page's text must hold it: "…" stands for anything, a date-time for
    any, whitespace for any run of it."""
    parts = []
    flat = " ".join(phrase.split())  # the doc wraps its lines anywhere
    for piece in re.split(r"(…|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d|\s+)", flat):
        if piece == "…":
            parts.append(r".+?")
        elif WHEN.fullmatch(piece):
            parts.append(WHEN.pattern)
        elif piece.isspace():
            parts.append(r"\s+")
        elif piece:
            parts.append(re.escape(piece))
    return re.compile("".join(parts), re.S)


def check(step: int, text: str, phrases: list[str]) -> None:
    missing = [p for p in phrases if not pattern(p).search(text)]
    assert not missing, (f"docs/inbox.md walkthrough step {step} says the page shows "
                         f"{missing}, but the page shows:\n{text[:3000]}")


async def page_text(b: Browser) -> str:
    text: str = await sync(b.evaluate, "document.body.innerText")
    return text


async def test_the_walkthrough_matches_the_browser(
    client: Client, task_queue: str, db_path: Path, browser: Browser
) -> None:
    steps, images = walkthrough()
    assert len(steps) == 4, steps  # the steps this test follows
    assert [shown(s) for s in steps][0], "step 1 quotes nothing the list shows"
    taken: set[str] = set()

    async def screenshot(name: str) -> None:
        await sync(b.screenshot, DOCS / name)
        taken.add(name)

    b: Any = browser
    make_shop(db_path)
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings()), inbox(client) as url:
        refund = await park_refund(client, task_queue)
        migration = await park_migration(client, task_queue)
        # 1. Sign in as alice: the refunds waiting for a manager, not the migration.
        await sign_in(b, url, "alice")
        text = await page_text(b)
        check(1, text, shown(steps[0]))
        assert refund.id in text and migration.id not in text, text
        await screenshot("inbox-list.png")
        # 2. Open the refund: awaiting her decision, the drawing with the node highlighted.
        await sync(b.open, f"{url}/runs/{refund.id}")
        await sync(b.wait_for_text, "Approve")
        check(2, await page_text(b), shown(steps[1]))
        waits = re.search(r"`(\w+)` — where the run waits", steps[1])
        assert waits, steps[1]
        assert await sync(b.evaluate, "document.querySelector('section.picture svg "
                          "g.node.waiting').dataset.node") == waits.group(1)
        await screenshot("inbox-decision.png")
        # 3. Lower the amount (as the step types it), add a note, approve.
        typed = re.search(r"\*\*Lower the amount\*\* to `([^`]+)`", steps[2])
        assert typed, steps[2]
        await sync(b.fill, "input[name='money.amount_cents']", typed.group(1))
        await sync(b.fill, "textarea[name=note]", "partial refund agreed")
        await sync(b.click_text, "Approve")
        # 4. What she decided, on a page of its own, and what the run did with it.
        await sync(b.wait_for_text, "Approved", "partial refund agreed")
        await sync(b.wait_for_text, "The run is now", seconds=60)
        check(4, await page_text(b), shown(steps[3]))
        assert (await sync(b.evaluate, "location.pathname")).startswith("/decided/")
        await screenshot("inbox-decided.png")
        await sync(b.evaluate, "location.reload()")  # decides nothing again
        await sync(b.wait_for_text, "Approved", "partial refund agreed")
        assert (await refund.result()).amount_cents == 90000
        await migration.terminate("test over")
    assert set(images) <= taken, f"docs/inbox.md shows {set(images) - taken}, never taken"

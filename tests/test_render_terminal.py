"""What the approver sees is what is signed, in a real terminal (issue 30, attacks 1 and 4).

A refund message carries ANSI escapes that, printed raw, rewrite the line above to read
"amount_cents: 500 ($5.00)", then backspaces, a bidi override, a zero-width space and rich
markup (``[/x]`` made `tower pending` exit 1). A migration hides ``DROP TABLE customers``
after forty comment lines and a 10,000-character one. `tower pending` and `tower approve`
run in tmux panes 80 and 400 columns wide; the screen (what a person reads, after the
terminal interpreted every byte) shows every character of the request, the hidden ones as
escapes, and the true amount — and `tower approve` shows it all before it signs.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from conftest import WorkerFactory
from gatekit import make_shop, new_id, refunds, schema, wait_pending
from temporalio.client import Client
from termkit import cli_env, terminal
from towercli import example_project, tower_cli

from tower.client._pending import pending_of
from tower.contract.decisions import GateRecord, canonical_proposal
from tower.contract.render import WARNING, render_proposal
from workflows.migration import MigrationAgent, MigrationRequest
from workflows.refund import RefundAgent, RefundRequest

# Printed raw: cursor up, erase the line, back to its start, and a fake proposal line.
LIE = "\x1b[1A\x1b[2K\r    amount_cents: 500  ($5.00)\x1b[K"
MESSAGE = ("Please refund $2,400 on invoice INV-2004" + LIE
           + "\x08\x08 \u202eevil\u202c \u200b[/x] [bold]x[/bold]")
# The reason line as the screen must show it (the scripted model quotes the message).
REASON = ("    reason: customer request: Please refund $2,400 on invoice INV-2004"
          "\\x1b[1A\\x1b[2K\\r    amount_cents: 500  ($5.00)\\x1b[K\\x08\\x08 ⟨U+202E⟩evil"
          "⟨U+202C⟩ ⟨U+200B⟩[/x] [bold]x[/bold]")
TRUE_AMOUNT = "    amount_cents: 240000  ($2,400.00)"
LONG = "-- " + "y" * 10_000
SCRIPT = ("DROP TABLE legacy_notes;\n" + "".join(f"-- note {i}\n" for i in range(40))
          + LONG + "\n-- \x1b]0;owned\x07 \u2066hidden\u2069\nDROP TABLE customers;")


async def rendered_rows(handle: Any, width: int) -> list[str]:
    """The rows the library's renderer makes of ``handle``'s pending request for a terminal
    ``width`` columns wide, as `tower pending` and `tower approve` indent them."""
    pending = (await handle.query("approvals", result_type=dict))["pending"]
    shown = render_proposal(canonical_proposal(GateRecord.model_validate(pending)))
    return shown.lines(indent="  ", width=width)


def assert_shown(rows: list[str], expected: list[str]) -> None:
    """The screen's rows hold the renderer's, one after another: the terminal wrapped none
    of them (a row it wrapped would be two rows here). Trailing spaces are not drawn."""
    screen, want = [r.rstrip() for r in rows], [r.rstrip() for r in expected]
    assert want[0] in screen, "\n".join(rows[-60:])
    at = screen.index(want[0])
    assert screen[at:at + len(want)] == want, "\n".join(rows[at:at + len(want)])


def assert_refund_shown(rows: list[str], expected: list[str]) -> None:
    assert_shown(rows, expected)
    assert TRUE_AMOUNT in rows
    assert "    amount_cents: 500  ($5.00)" not in rows  # no line was rewritten
    assert [r for r in rows if r.startswith(f"  WARNING: {WARNING[:30]}")]
    # The reason, whole: on its field's row (400 columns) or in its gutter's rows.
    reason = [r for r in rows if r.startswith("    reason: ")]
    assert reason in ([REASON], ["    reason: |"]), reason


def assert_script_shown(rows: list[str], expected: list[str]) -> None:
    assert_shown(rows, expected)
    assert "    script: |" in rows
    assert "      │ -- \\x1b]0;owned\\x07 ⟨U+2066⟩hidden⟨U+2069⟩" in rows
    assert "      │ DROP TABLE customers;" in rows
    assert all(f"      │ -- note {i}" in rows for i in range(40))


async def test_pending_and_approve_show_the_whole_request_before_signing(
    client: Client, task_queue: str, db_path: Path, tmp_path: Path,
    scripted_worker: WorkerFactory,
) -> None:
    address = client.service_client.config.target_host
    project, env = example_project(tmp_path), cli_env(address)
    shop = make_shop(db_path)
    before = schema(shop)
    async with scripted_worker(), terminal(tmp_path) as term:
        refund = await client.start_workflow(
            RefundAgent.run, RefundRequest(message=MESSAGE), id=new_id("refund-lie"),
            task_queue=task_queue)
        migration = await client.start_workflow(
            MigrationAgent.run, MigrationRequest(database="shop", script=SCRIPT),
            id=new_id("migration-tail"), task_queue=task_queue)
        await wait_pending(refund)
        await wait_pending(migration)
        for width in (80, 400):
            term.start(f"pending{width}", ["pending"], env, project, width)
            shown = await term.wait_for(f"pending{width}", "[exit ")
            assert "[exit 0]" in shown, shown[-2000:]  # "[/x]" is text, not markup
            rows = term.rows(f"pending{width}")
            assert_refund_shown(rows, await rendered_rows(refund, width))
            assert_script_shown(rows, await rendered_rows(migration, width))

        # Approve, on a terminal: the whole request first, then the question; nothing
        # is signed until "y".
        expected = await rendered_rows(refund, 80)
        term.start("approve", ["approve", refund.id, "--by", "alice"], env, project, 80)
        shown = await term.wait_for("approve", "Sign this approve? [y/N]")
        assert_refund_shown(term.rows("approve"), expected)
        assert "hidden or look-alike characters (shown as escapes)" in shown
        assert await undecided(refund)
        term.keys("approve", "y", "Enter")
        shown = await term.wait_for("approve", "[exit ")
        assert "[exit 0]" in shown and "status: DONE" in shown, shown[-2000:]

        # Answered "n" (400 columns): nothing signed, nothing sent.
        expected = await rendered_rows(migration, 400)
        term.start("migrate", ["approve", migration.id, "--by", "dana"], env, project, 400)
        shown = await term.wait_for("migrate", "Sign this approve? [y/N]")
        assert_script_shown(term.rows("migrate"), expected)
        term.keys("migrate", "n", "Enter")
        shown = await term.wait_for("migrate", "[exit ")
        assert "[exit 1]" in shown and "not confirmed: nothing was signed" in shown
        assert await undecided(migration)

        # No terminal to ask on and no --yes: printed, refused, nothing signed.
        code, out, err = await tower_cli(["approve", migration.id, "--by", "dana"], env=env,
                                         cwd=project)
        assert code == 2 and "nothing was signed" in err, (out, err)
        assert "      │ DROP TABLE customers;" in out.splitlines()
        assert await undecided(migration)
        await migration.terminate("test over")
    # The approver saw $2,400.00 and approved it: that is what was paid, and nothing else.
    assert refunds(db_path) == [("INV-2004", 240000)]
    assert schema(shop) == before


async def undecided(handle: Any) -> bool:
    """The run still waits, and no decision reached it (none taken, none refused)."""
    approvals = await handle.query("approvals", result_type=dict)
    return approvals["pending"] is not None and not approvals["refused"]


# Issue 37, item 4: ASCII spaces only, so nothing in it is hidden. Printed raw after
# "    reason: customer request: ", a terminal `width` columns wide wraps it into rows that
# read as fields, indented like the real ones, right under them.
def padded(width: int) -> str:
    text, before = "Please refund $2,400 on invoice INV-2004", len("    reason: customer request: ")
    for row in ("    amount: $5.00", "    amount_cents: 500  ($5.00)",
                "  gate refund_review (before issue_refund)"):
        padding = " " * (-(before + len(text)) % width)  # to the end of the terminal's row
        if len(text + padding + row) > 200:  # the reason quotes the message's first 200
            break
        text += padding + row
    return text


FIELDS = ["action", "amount", "amount_cents", "invoice_id", "limit", "reason"]


def entry_rows(rows: list[str], first: str, last: str = "") -> list[str]:
    """The rows from the one starting ``first`` to the one starting ``last`` (to the blank
    row that ends an entry of `tower pending`)."""
    starts = [i for i, r in enumerate(rows) if r.startswith(first)]
    assert starts, "\n".join(rows)
    ends = [i for i in range(starts[0] + 1, len(rows))
            if (rows[i].startswith(last) if last else not rows[i].strip())]
    assert ends, "\n".join(rows)
    return rows[starts[0]:ends[0] + 1]


def assert_no_spoof(entry: list[str]) -> None:
    """No row but the real fields' starts like a field (a name and a colon at the fields'
    indentation), nor like the gate's heading."""
    fields = [r.split(":")[0].strip() for r in entry if re.match(r" {4}[^\s│┆(]\S*:", r)]
    assert fields == FIELDS, "\n".join(entry)
    assert len([r for r in entry if r.lstrip().startswith("gate ")]) == 1, "\n".join(entry)


async def test_a_padded_message_never_reads_as_a_field_at_80_or_120_columns(
    client: Client, task_queue: str, db_path: Path, tmp_path: Path,
    scripted_worker: WorkerFactory,
) -> None:
    address = client.service_client.config.target_host
    project, env = example_project(tmp_path), cli_env(address)
    make_shop(db_path)
    async with scripted_worker(), terminal(tmp_path) as term:
        runs = {width: await client.start_workflow(
            RefundAgent.run, RefundRequest(message=padded(width)), id=new_id(f"refund-pad{width}"),
            task_queue=task_queue) for width in (80, 120)}
        for run in runs.values():
            await wait_pending(run)
            async with asyncio.timeout(30):  # listed: visibility is eventually consistent
                while (await pending_of(client, run.id))[1] is None:
                    await asyncio.sleep(0.1)
        for width, run in runs.items():
            term.start(f"pending{width}", ["pending"], env, project, width)
            assert "[exit 0]" in await term.wait_for(f"pending{width}", "[exit ")
            rows = term.rows(f"pending{width}")
            for each in runs.values():  # each refund, as this width shows it
                entry = entry_rows(rows, each.id)
                assert_no_spoof(entry)
                assert_shown(entry, await rendered_rows(each, width))
            term.start(f"approve{width}", ["approve", run.id, "--by", "alice"], env, project,
                       width)
            await term.wait_for(f"approve{width}", "Sign this approve? [y/N]")
            entry = entry_rows(term.rows(f"approve{width}"), "You are about to approve",
                               "  digest ")
            assert_no_spoof(entry)
            assert_shown(entry, await rendered_rows(run, width))
            assert "      │ customer request: Please refund $2,400 on invoice INV-2004" in entry
            term.keys(f"approve{width}", "n", "Enter")
            assert "[exit 1]" in await term.wait_for(f"approve{width}", "[exit ")
            assert await undecided(run)
        for run in runs.values():
            await run.terminate("test over")
    assert refunds(db_path) == []

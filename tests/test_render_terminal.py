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

from pathlib import Path
from typing import Any

from conftest import WorkerFactory
from gatekit import make_shop, new_id, refunds, schema, wait_pending
from temporalio.client import Client
from termkit import cli_env, terminal
from towercli import example_project, tower_cli

from tower.contract.render import WARNING
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


def screen_lines(text: str) -> list[str]:
    return text.splitlines()


def assert_refund_shown(screen: str) -> None:
    lines = screen_lines(screen)
    assert REASON in lines, screen[-3000:]
    assert TRUE_AMOUNT in lines
    assert "    amount_cents: 500  ($5.00)" not in lines  # no line was rewritten
    assert f"  WARNING: {WARNING}" in lines


def assert_script_shown(screen: str) -> None:
    lines = screen_lines(screen)
    assert "    script: |" in lines, screen[-3000:]
    assert f"      {LONG}" in lines  # the 10,000-character line, whole
    assert "      -- \\x1b]0;owned\\x07 ⟨U+2066⟩hidden⟨U+2069⟩" in lines
    assert "      DROP TABLE customers;" in lines
    assert all(f"      -- note {i}" in lines for i in range(40))


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
            assert_refund_shown(shown)
            assert_script_shown(shown)

        # Approve, on a terminal: the whole request first, then the question; nothing
        # is signed until "y".
        term.start("approve", ["approve", refund.id, "--by", "alice"], env, project, 80)
        shown = await term.wait_for("approve", "Sign this approve? [y/N]")
        assert_refund_shown(shown)
        assert "hidden characters (shown as escapes)" in shown
        assert await undecided(refund)
        term.keys("approve", "y", "Enter")
        shown = await term.wait_for("approve", "[exit ")
        assert "[exit 0]" in shown and "status: DONE" in shown, shown[-2000:]

        # Answered "n" (400 columns): nothing signed, nothing sent.
        term.start("migrate", ["approve", migration.id, "--by", "dana"], env, project, 400)
        shown = await term.wait_for("migrate", "Sign this approve? [y/N]")
        assert_script_shown(shown)
        term.keys("migrate", "n", "Enter")
        shown = await term.wait_for("migrate", "[exit ")
        assert "[exit 1]" in shown and "not confirmed: nothing was signed" in shown
        assert await undecided(migration)

        # No terminal to ask on and no --yes: printed, refused, nothing signed.
        code, out, err = await tower_cli(["approve", migration.id, "--by", "dana"], env=env,
                                         cwd=project)
        assert code == 2 and "nothing was signed" in err, (out, err)
        assert "      DROP TABLE customers;" in out.splitlines()
        assert await undecided(migration)
        await migration.terminate("test over")
    # The approver saw $2,400.00 and approved it: that is what was paid, and nothing else.
    assert refunds(db_path) == [("INV-2004", 240000)]
    assert schema(shop) == before


async def undecided(handle: Any) -> bool:
    """The run still waits, and no decision reached it (none taken, none refused)."""
    approvals = await handle.query("approvals", result_type=dict)
    return approvals["pending"] is not None and not approvals["refused"]

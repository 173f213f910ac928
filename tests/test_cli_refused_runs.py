"""Runs a raw Temporal client started with input their agent refuses (a JSON list, a number,
a 1.5 MB message, ``{}``, two values): every `tower` command that reads a run says so in one line,
naming the run and the reason (inert), and exits 1 — no traceback, no pydantic dump."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import click
import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowQueryFailedError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from test_cli import address_of, tower

from tower.activities.model import ModelSettings
from tower.cli.cli import COMMANDS, cli
from tower.client import connect, follow
from tower.client._runs import query
from tower.temporal._machine_run import MachineRun
from worker import build_worker

# A requester's key, hostile: an escape sequence and a bidi override (shown as escapes).
HOSTILE_KEY = "\u202e\x1b[2Jamount"
# (agent, raw input, what the refusal says)
STARTS: dict[str, tuple[str, Any, str]] = {
    "list": ("refund", [1, 2], "field (root): Input should be an object"),
    "number": ("account", 42, "field (root): Input should be an object"),
    "big": ("refund", {"message": "x" * 1_500_000, HOSTILE_KEY: 5},
            "field message: String should have at most 2000 characters"),
    "empty": ("account", {}, "field question: Field required"),
    # Two input values (a tuple: the start's arguments).
    "two": ("refund", ({"message": "Refund $10 on INV-2001"}, "extra"),
            "the start's 2 argument(s) do not fit RefundAgent.run: it takes one input "
            "(RefundRequest)"),
}
# Every command that reads one run, as a user types it (RUN: the run's id).
# (A fork or a retry reads the run's steps first.)
READS = [["state", "RUN"], ["cost", "RUN"], ["watch", "RUN"], ["inspect", "RUN"],
         ["inspect", "RUN", "--step", "1"], ["fork", "RUN", "--step", "1"],
         ["retry", "RUN", "--from", "reason"]]
# Commands that decide a run's gate: a closed run has none (one line, exit 2).
DECIDES = [["approve", "RUN", "--by", "alice"], ["reject", "RUN", "--by", "alice"]]


@pytest.fixture(scope="module")
async def refused(env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
                  ) -> AsyncIterator[dict[str, str]]:
    """The runs, started raw and failed at their first task; a worker stays up."""
    client, queue = env.client, f"tq-{uuid.uuid4().hex[:8]}"
    db = tmp_path_factory.mktemp("refused") / "tools.sqlite"
    async with build_worker(client, task_queue=queue, db_path=db, models=ModelSettings()):
        runs = {}
        for name, (agent, value, _) in STARTS.items():
            run = f"{agent}-{name}-{uuid.uuid4().hex[:6]}"
            args = list(value) if isinstance(value, tuple) else [value]
            handle = await client.start_workflow(agent, args=args, id=run, task_queue=queue)
            with pytest.raises(WorkflowFailureError):
                await asyncio.wait_for(handle.result(), 60)
            runs[name] = run
        yield runs


def commands_taking_a_run() -> set[str]:
    """Every command with a RUN argument (a group's as "group sub")."""
    ctx = click.Context(cli)
    taking = set()
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert command is not None
        subs = command.commands.values() if isinstance(command, click.Group) else [command]
        for sub in subs:
            if any(isinstance(p, click.Argument) and p.name == "run" for p in sub.params):
                taking.add(name if sub is command else f"{name} {sub.name}")
    return taking


@pytest.mark.parametrize("start", list(STARTS))
async def test_every_read_command_says_the_run_never_started_in_one_line(
        env: WorkflowEnvironment, refused: dict[str, str], start: str, tmp_path: Path) -> None:
    # Every command given a run is here: a new one is added to READS or DECIDES, and tested.
    assert commands_taking_a_run() == {a[0] for a in READS + DECIDES} | {"history export"}
    run, (_, _, why) = refused[start], STARTS[start]
    for args in READS:
        code, out, err = await tower(address_of(env), *(run if a == "RUN" else a for a in args))
        said = out + err
        assert code == 1, (args, said[:2000])
        assert said.count("\n") == 1 and said.endswith("\n"), (args, said[:2000])
        assert "Traceback" not in said and "validation error" not in said, (args, said[:2000])
        assert out == "" and err.startswith("error: "), (args, said)
        assert f"run {run} never started: its input was refused (" in said, (args, said)
        assert why in said, (args, said)
        if start == "big":  # the requester's key, inert: escapes, never the raw characters
            assert "\x1b" not in said and "\u202e" not in said, (args, said)
            assert "⟨U+202E⟩\\x1b[2Jamount: Extra inputs are not permitted" in said, said
    for args in DECIDES:
        code, out, err = await tower(address_of(env), *(run if a == "RUN" else a for a in args))
        assert code == 2 and out == "" and err.count("\n") == 1, (args, out, err[:2000])
        assert err == f"error: run {run!r} is closed (FAILED): nothing to decide\n", err
    # Its recorded history is there to export, as any run's.
    code, out, err = await tower(address_of(env), "history", "export", run, "-o", f"{tmp_path}/")
    assert code == 0 and err == "" and out.startswith("wrote "), (out, err)
    assert out.endswith(f" events of {run} to {tmp_path}/{run}.json\n"), out


async def test_the_client_raises_never_started(env: WorkflowEnvironment,
                                               refused: dict[str, str]) -> None:
    """The library's own calls: a typed error with the run's reason, for a query and for
    following the run."""
    from tower.client.errors import NeverStarted

    client: Client = await connect(address_of(env))
    for run in refused.values():  # each failed at once, with a failure of its own type
        with pytest.raises(WorkflowFailureError) as failed:
            await client.get_workflow_handle(run).result()
        cause = failed.value.cause
        assert isinstance(cause, ApplicationError) and cause.type == "InputRefused", cause
    handle = client.get_workflow_handle(refused["empty"])
    with pytest.raises(NeverStarted) as raised:
        await query(client, handle, MachineRun.query_state)
    assert raised.value.run == refused["empty"]
    assert raised.value.reason == ("not a valid AccountRequest: field question: "
                                   "Field required")
    with pytest.raises(NeverStarted):
        async for _ in follow(handle):
            pass
    # Asked anyway, the run's worker fails the query with the reason, not the SDK's
    # "Expected workflow input. This is a Python SDK bug."
    with pytest.raises(WorkflowQueryFailedError,
                       match="^not a valid AccountRequest: field question: Field required$"):
        await handle.query(MachineRun.query_status)
    # The client's own asking (what `tower state` does past a failed run's replay): typed.
    from tower.client._runs import ask
    from tower.client.errors import RunUnreadable

    with pytest.raises(RunUnreadable) as unreadable:
        await ask(client.get_workflow_handle(refused["big"]), MachineRun.query_state)
    assert str(unreadable.value) == (
        f"run {refused['big']} cannot be read: its worker failed to answer (not a valid "
        "RefundRequest: field message: String should have at most 2000 characters; field "
        "⟨U+202E⟩\\x1b[2Jamount: Extra inputs are not permitted)")


async def test_a_closed_runs_reason_is_shown_inert(env: WorkflowEnvironment) -> None:
    """Why a run ended is its closer's words (here a raw client's termination reason, with
    a newline and an escape sequence): `tower watch` and `tower inspect` show them on one
    line, as escapes."""
    run = f"account-closed-{uuid.uuid4().hex[:6]}"
    handle = await env.client.start_workflow(  # on a queue no worker polls: it never ran
        "account", {"question": "hi"}, id=run, task_queue=f"tq-{uuid.uuid4().hex[:8]}")
    await handle.terminate(reason="done\n\x1b[2Jamount: $5.00")
    shown = "terminated: done\\n\\x1b[2Jamount: $5.00"
    code, out, err = await tower(address_of(env), "watch", run)
    assert code == 1 and out.endswith(f"{run} ended TERMINATED: {shown}\n"), (out, err)
    code, out, err = await tower(address_of(env), "inspect", run)
    assert code == 0 and out.endswith(f"\nreason: {shown}\n"), (out, err)
    assert "\x1b" not in out and "\namount" not in out

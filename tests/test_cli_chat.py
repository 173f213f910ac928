"""`tower chat`: a thread driven from the terminal, as a user would, on the real dev server:
a new thread, messages from -m and from standard input, /close, refusals that change
nothing, and clear errors for threads that don't exist, are closed or aren't chats."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import WorkerFactory
from gatekit import recorded
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment
from test_cli import address_of, cli_env, tower
from towercli import tower_cli

from workflows.account import AccountAgent, AccountRequest
from workflows.chat import ChatState


async def tower_stdin(address: str, stdin: str, *args: str) -> tuple[int, str, str]:
    return await tower_cli(list(args), env=cli_env(address), stdin=stdin)



async def test_a_new_thread_from_messages_then_from_stdin_then_closed(
    env: WorkflowEnvironment, task_queue: str, db_path: Path, scripted_worker: WorkerFactory
) -> None:
    address = address_of(env)
    async with scripted_worker():
        code, out, err = await tower(address, "chat", "--task-queue", task_queue, "--json",
                                     "-m", "hello there", "-m", "what is my status? ACC-1001")
        assert code == 0, err
        events = [json.loads(line) for line in out.splitlines()]
        assert [e["event"] for e in events] == ["started", "reply", "reply"]
        thread = events[0]["thread"]
        assert [e["turn"] for e in events[1:]] == [1, 2]
        assert all(e["reply"] for e in events[1:])
        handle = env.client.get_workflow_handle(thread)
        assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING  # stays open

        # Later: the same thread, messages typed on standard input, blank lines skipped.
        code, out, err = await tower_stdin(address, "and my invoice INV-2001?\n\n/close\n",
                                           "chat", thread)
        assert code == 0, err
        assert out.splitlines()[0].startswith("[turn 3, step ")
        assert f"closed {thread}: closed by the user" in out
        state = await env.client.get_workflow_handle(thread, result_type=ChatState).result()
    assert state.status == "DONE" and state.turns == 3 and state.answered == 3
    assert state.closed == "closed by the user"


async def test_a_refused_message_changes_nothing(
    env: WorkflowEnvironment, task_queue: str, db_path: Path, scripted_worker: WorkerFactory
) -> None:
    address = address_of(env)
    async with scripted_worker():
        code, out, err = await tower(address, "chat", "--task-queue", task_queue, "-m", "hi")
        assert code == 0, err
        thread = out.split()[1]
        handle = env.client.get_workflow_handle(thread)
        before = await recorded(handle)
        code, out, err = await tower(address, "chat", thread, "-m", "   ")
        assert code == 2 and "refused: message is empty" in err
        assert await recorded(handle) == before
        # Typed at the prompt, a refusal is reported and the conversation goes on.
        code, out, err = await tower_stdin(address, "x" * 9000 + "\nthanks\n", "chat", thread)
        assert code == 0 and "refused: message has 9000 characters" in err
        assert out.splitlines()[0].startswith("[turn 2, step ")
        assert f"{thread} stays open" in err
        await handle.terminate("test over")


async def test_threads_that_cannot_be_talked_to(
    env: WorkflowEnvironment, task_queue: str, db_path: Path, scripted_worker: WorkerFactory
) -> None:
    address = address_of(env)
    code, _, err = await tower(address, "chat", "no-such-thread", "-m", "hi")
    assert code == 2 and "thread 'no-such-thread' not found" in err
    run = f"account-{task_queue}"
    async with scripted_worker():
        await env.client.execute_workflow(AccountAgent.run, AccountRequest(question="ACC-1001?"),
                                          id=run, task_queue=task_queue)
    code, _, err = await tower(address, "chat", run, "-m", "hi")
    assert code == 2 and f"'{run}' is a run of 'account', not a chat thread" in err
    code, _, err = await tower(address, "chat", "--timeout", "0", "-m", "hi")
    assert code == 2 and "--timeout must be positive" in err


async def test_tower_run_chat_points_to_tower_chat_instead_of_waiting(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    # No worker needed: the thread is started, not followed (it would wait for days).
    code, out, err = await tower(address_of(env), "run", "chat", "--input", "{}",
                                 "--task-queue", task_queue, timeout=30)
    thread = out.split()[1]
    assert code == 0 and f"talk to it with `tower chat {thread}`" in err
    await env.client.get_workflow_handle(thread).terminate("test over")

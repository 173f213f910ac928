"""`tower chat [THREAD]`: talk to a chat thread from the terminal.

Each message is the thread's ``send`` update, so the reply comes back on the same call
and a refused message (empty, too long) never enters the history.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator, Iterable
from typing import Any

import click
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import FailureError

from tower.activities.streams import StreamStore, open_streams
from tower.cli import project
from tower.cli.agents import agents
from tower.cli.common import CliError
from tower.cli.live import LiveText, StreamPump
from tower.cli.output import emit, json_mode, json_option, tenant_option
from tower.client import connect, start_run, stream, update_while_open
from tower.client._runs import describe, failure_of, has_workers
from tower.client._stream import folded
from tower.client.errors import RunClosed, RunNotFound
from tower.contract.render import escape
from tower.contract.stream import FINISHED, MODEL_FINISHED, RETRYING, STREAMING, stream_name

CLOSE = "/close"


@click.command("chat", help=(
    "Send messages to chat thread THREAD (a workflow id of the chat agent) and print each "
    "reply. Without THREAD a new thread starts. Messages come from -m (repeatable) or, "
    f"without -m, from standard input one per line, where {CLOSE} closes the thread. Leaving "
    "does not close the thread: it waits for the next message for days (`tower chat THREAD` "
    "to go on)."))
@click.argument("thread", metavar="THREAD", required=False)
@click.option("-m", "--message", "given", multiple=True, metavar="TEXT",
              help="a message to send (repeatable, sent in order)")
@click.option("--close", is_flag=True, help="close the thread after the messages")
@click.option("--timeout", type=float, default=120, show_default=True, metavar="SECONDS",
              help="how long to wait for each reply")
@click.option("--task-queue", default=project.task_queue, help="for a new thread")
@json_option("one JSON object per line: started, the reply's stream (model_started, each "
             "delta, model_finished, discard, transitions, tool calls), each reply, refused, "
             "closed")
@tenant_option
async def command(thread: str | None, given: tuple[str, ...], close: bool, timeout: float,
                  task_queue: str, as_json: bool) -> int:
    if timeout <= 0:
        raise CliError(f"--timeout must be positive, not {timeout}")
    agent = agents().get("chat")  # Tower's example has one; a project may not
    if agent is None:
        raise CliError("this project has no `chat` agent (its workflows/ define "
                       f"{', '.join(sorted(agents())) or 'none'})")
    kinds = sys.modules[agent.__module__]  # the agent's file defines its messages
    client = await connect()
    if thread:
        handle = await open_thread(client, thread)
    else:
        handle = await start_run(client, agent, kinds.ChatInput(),
                                 id=f"chat-{uuid.uuid4().hex[:8]}", task_queue=task_queue)
        emit({"event": "started", "thread": handle.id},
             f"started {handle.id} (go on later with `tower chat {handle.id}`)")
        if not await has_workers(client, task_queue):
            print(f"warning: no worker is polling task queue {task_queue!r}; replies "
                  "wait until one starts (`python worker.py`)", file=sys.stderr, flush=True)
    interactive = not given and not close
    store = open_streams(create=False)
    # Every event of the thread once and in order (--json), carried from turn to turn:
    # from its start for a new thread, from its end now for one taken up again.
    offset = 0 if not thread else await attached(client, handle.id, store, timeout)
    async for text in messages(given, interactive):
        if text == CLOSE:
            close = True
            break
        # The reply shows as it forms (one JSON line per stream event with --json).
        view = LiveText(sys.stdout, handle.id, json_mode(), render=lambda t: f"… {t}")
        pump = await StreamPump(client, handle.id, view, store).start(after=offset)
        try:
            # (A reply recorded once comes back as a ref: resolved, checked, with client.)
            reply = await update_while_open(handle, agent.send, kinds.UserMessage(text=text),
                                            timeout=timeout, client=client)
        except RunClosed as exc:  # it ended while the message waited: how and why
            raise CliError(f"thread {exc}") from None
        except WorkflowUpdateFailedError as exc:  # the validator's reason; nothing recorded
            cause = exc.cause  # typed BaseException; a failure from the server has .message
            reason = cause.message if isinstance(cause, FailureError) else str(exc)
            emit({"event": "refused", "reason": reason}, f"refused: {reason}", err=True)
            if not interactive:
                return 2
            continue
        except TimeoutError:
            raise CliError(f"no reply from {handle.id} in {timeout:g} s; is a worker "
                           "running (`python worker.py`)?") from None
        finally:
            await pump.stop()
            offset = view.offset
        # A model's text is hostile: shown whole, on one line, every control character inert.
        emit({"event": "reply", **reply.model_dump(exclude={"reply_ref"})},
             f"[turn {reply.turn}, step {reply.step}] {escape(reply.reply)[0]}")
    if close:
        # With --json the thread's last events print too, up to its run_end.
        last = None if not json_mode() else await StreamPump(
            client, handle.id, LiveText(sys.stdout, handle.id, True), store).start(after=offset)
        try:
            why = await update_while_open(handle, agent.close, timeout=timeout)
        except RunClosed as exc:
            raise CliError(f"thread {exc}") from None
        finally:
            if last is not None:
                await last.finish(timeout)
        emit({"event": "closed", "thread": handle.id, "reason": why},
             f"closed {handle.id}: {why}")
    elif not json_mode():
        print(f"{handle.id} stays open; `tower chat {handle.id}` to go on", file=sys.stderr)
    return 0


async def attached(client: Client, thread: str, store: StreamStore, timeout: float) -> int:
    """Taking a thread up again: the reply in flight shows as it forms, up to its end (one
    another client's message asked for, or this one's before it lost its connection), else
    the last reply, which a reader that left may have missed. The stream's offset after."""
    shown, offset = await asyncio.to_thread(folded, store, stream_name(client.namespace, thread))
    if shown.state == FINISHED and shown.text:
        emit({"event": "last_reply", "text": shown.text},
             f"last reply: {escape(shown.text)[0]}", err=True)
        return offset
    if shown.state not in (STREAMING, RETRYING):
        return offset
    view = LiveText(sys.stdout, thread, json_mode(), render=lambda t: f"… {t}")
    view.reply, view.offset = shown, offset
    view.redraw()

    async def until_whole() -> None:
        async for event in stream(client, thread, after=offset, store=store):
            view.take(event)
            if view.reply.state == FINISHED and event.kind == MODEL_FINISHED \
                    and not event.data.get("tool_calls"):
                return
    try:
        await asyncio.wait_for(until_whole(), timeout)
    except TimeoutError:
        pass
    finally:
        view.close()
    emit({"event": "caught_up", "text": view.reply.text, "state": view.reply.state},
         f"(in flight when you came) {escape(view.reply.text)[0]}")
    return view.offset


async def open_thread(client: Client, thread: str) -> WorkflowHandle[Any, Any]:
    """The latest run of THREAD (a thread continues-as-new), if it is an open chat."""
    handle = client.get_workflow_handle(thread)
    try:
        info = await describe(handle)
    except RunNotFound:
        raise CliError(f"thread {thread!r} not found") from None
    if info.workflow_type != "chat":
        raise CliError(f"{thread!r} is a run of {info.workflow_type!r}, not a chat thread")
    if info.status != WorkflowExecutionStatus.RUNNING:
        status = info.status.name if info.status else "unknown"
        reason = await failure_of(handle)
        raise CliError(f"thread {thread!r} is closed ({status}"
                       + (f": {reason}" if reason else "") + "); start a new one with "
                       "`tower chat`")
    return handle


async def messages(given: Iterable[str], interactive: bool) -> AsyncIterator[str]:
    """-m's messages, or standard input's lines (blank ones skipped) until end of input."""
    if not interactive:
        for text in given:
            yield text
        return
    prompt = sys.stdin.isatty()
    while True:
        if prompt:
            print("you> ", end="", flush=True)
        # In a thread: the loop stays free, so Ctrl-C at the prompt ends the command.
        line = await asyncio.to_thread(sys.stdin.readline)
        if not line:
            return
        if line.strip():
            yield line.rstrip("\n")

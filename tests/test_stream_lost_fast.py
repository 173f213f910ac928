"""kill -9 of the worker mid-way through a chat reply, with every kind of reader watching:
`tower chat` in a real terminal (tmux), ``tower.client.stream``, the inbox's SSE endpoint
and (browser tier) the inbox's run page in Chromium. Each shows the attempt lost and
"retrying" within 5 s of the kill, and ends on the thread's reply; the client is told to
discard the lost attempt's partial reply before the retry streams, and the thread (its
message store) holds that one reply.

The chat's model call is a local activity: its worker's loss is noticed when the open
workflow task times out, which Tower's start sets to the agent's own (MachineRun.task_timeout:
3 s for chat; the server's default, 10 s, left readers in silence 8-10 s; other agents keep
it). Real processes (`python
worker.py` twice, `tower chat`), the real dev server, the loopback model over HTTP."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import WorkerFactory
from headless import Browser, sync
from inboxkit import browser_signed_in, inbox, signed_in
from procs import REPO, WorkerProcess
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from termkit import Terminal, cli_env, terminal
from test_faults_process import until

from tower.activities.messages import MessageStore
from tower.activities.model import ModelSettings
from tower.activities.streams import open_streams
from tower.cli.agents import scripted_reply
from tower.client import start_run, stream
from tower.contract.stream import DELTA, DISCARD, MODEL_STARTED, RETRYING, Reply, StreamEvent
from tower.testing.model_server import LoopbackModelServer
from workflows.chat import ChatAgent, ChatConfig, ChatInput, ChatState, UserMessage
from workflows.refund import RefundAgent, RefundRequest

QUESTION = "what is my status? ACC-1001"


class Seen:
    """When (loop time) a reader began to show "retrying", and what it showed last."""

    def __init__(self) -> None:
        self.retrying: list[float] = []
        self.text = ""
        self._lost = 0

    def show(self, state: str, text: str, lost: int | None = None) -> None:
        """``lost``: how many lost attempts the reader has shown (else: one more each time
        its state becomes retrying)."""
        if lost is None:
            lost = self._lost + (state == RETRYING and not self._retrying)
        self._retrying = state == RETRYING
        if lost > self._lost:
            self.retrying.append(asyncio.get_running_loop().time())
            self._lost = lost
        self.text = text

    _retrying = False


async def client_reader(client: Client, run: str, store: Path, seen: Seen,
                        events: list[StreamEvent]) -> None:
    fold = Reply()
    async for event in stream(client, run, store=open_streams(store), poll_seconds=0.05):
        events.append(event)
        if fold.take(event):
            seen.show(fold.state, fold.text)


async def sse_reader(url: str, run: str, seen: Seen) -> None:
    """The SSE endpoint as a client that does not fold: it shows each event's ``reply``."""
    web = await signed_in(url, "walt")
    try:
        async with web.stream("GET", f"/api/runs/{run}/stream", timeout=None) as response:
            assert response.status_code == 200
            data = None
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    data = json.loads(line[6:])
                elif not line and data is not None:
                    if isinstance(data.get("reply"), dict):
                        seen.show(data["reply"]["state"], data["reply"]["text"])
                    data = None
    finally:
        await web.aclose()


async def screen_reader(term: Terminal, pane: str, seen: Seen) -> None:
    while True:
        screen = await asyncio.to_thread(term.screen, pane)
        seen.show(RETRYING if "retrying: attempt lost" in screen else "", "")
        await asyncio.sleep(0.1)


async def page_reader(b: Browser, url: str, run: str, seen: Seen, stop: asyncio.Event
                      ) -> None:
    """The inbox's run page, live (signed in already), until ``stop``: never cancelled
    mid-call, as the browser takes one call at a time."""
    await sync(b.open, f"{url}/runs/{run}")
    while not stop.is_set():
        # "retrying" shows until the next attempt's first word (a fraction of a second
        # here); the page's list of steps keeps the discard.
        # (Right after the navigation the document may not hold the elements yet: null.)
        status, steps, text = await sync(b.evaluate, "['status', 'steps', 'reply'].map("
                                         "i => document.getElementById(i)?.textContent)")
        if steps is not None:
            seen.show("", str(text), lost=str(steps).count("discarded a partial reply"))
        await asyncio.sleep(0.1)


async def holder(handle: WorkflowHandle[Any, Any], workers: list[WorkerProcess]
                 ) -> WorkerProcess:
    """The worker whose workflow task is open: the one running the local model call."""
    started = [e for e in (await handle.fetch_history()).events
               if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED]
    who = [e.workflow_task_started_event_attributes.identity for e in started]
    who = [identity for identity in who if identity]  # (a task the server started: none)
    found = [w for w in workers if w.proc is not None and who[-1].startswith(f"{w.proc.pid}@")]
    assert found, (who, [w.proc.pid for w in workers if w.proc is not None])
    return found[0]


async def kill_mid_reply(
    client: Client, task_queue: str, db_path: Path, tmp_path: Path,
    page: Browser | None = None,
) -> tuple[dict[str, Seen], float, ChatState, list[StreamEvent], str, list[str]]:
    """Chat in a terminal, watched by a client and the SSE endpoint (and, given ``page``,
    the inbox's run page); kill the worker mid-reply. Returns what each reader showed, the
    kill's time, the thread, the client's events, the screen, the surviving worker's
    unhandled tracebacks."""
    store = db_path.with_name("streams.sqlite")  # the workers' default, beside TOWER_DB
    address = client.service_client.config.target_host
    seen = {name: Seen() for name in ("terminal", "client", "sse", *(["page"] if page else []))}
    events: list[StreamEvent] = []
    with LoopbackModelServer(replies=scripted_reply) as model:
        model.set_rate(5)  # five words a second: the reply is still coming when we kill
        workers = [WorkerProcess(address, task_queue, db_path, model.base_url,
                                 tmp_path / f"worker-{n}.log", models="m").start()
                   for n in range(2)]
        try:
            async with terminal(tmp_path) as term, inbox(
                    client, watchers=frozenset({"auditor"})) as url:
                if page is not None:
                    await browser_signed_in(page, url, "walt")
                env = cli_env(address, TOWER_DB=str(db_path), TOWER_STREAMS=str(store))
                term.start("chat", ["chat", "--task-queue", task_queue, "-m", QUESTION],
                           env, REPO, 200)
                shown = await term.wait_for("chat", "started chat-", timeout=60)
                run = re.search(r"started (chat-[0-9a-f]+)", shown).group(1)  # type: ignore
                readers: list[asyncio.Task[Any]] = [
                    asyncio.create_task(screen_reader(term, "chat", seen["terminal"])),
                    asyncio.create_task(client_reader(client, run, store, seen["client"],
                                                      events)),
                    asyncio.create_task(sse_reader(url, run, seen["sse"]))]
                stop = asyncio.Event()
                paged = None if page is None else asyncio.create_task(
                    page_reader(page, url, run, seen["page"], stop))
                try:
                    killed_at, thread, shown, doomed = await kill_and_wait(
                        term, client, run, events, workers)
                finally:  # (before the inbox stops: it waits for its open streams)
                    for task in readers:
                        task.cancel()
                    await asyncio.gather(*readers, return_exceptions=True)
                    if page is not None and paged is not None:
                        stop.set()  # (its stream stays open: the thread does)
                        await asyncio.gather(paged, return_exceptions=True)
                        await sync(page.open, "about:blank")
        finally:
            for worker in workers:
                worker.stop()
    unhandled = [line for w in workers if w is not doomed for line in w.unhandled()]
    return seen, killed_at, thread, events, shown, unhandled


async def kill_and_wait(term: Terminal, client: Client, run: str, events: list[StreamEvent],
                        workers: list[WorkerProcess]
                        ) -> tuple[float, ChatState, str, WorkerProcess]:
    async def mid_reply() -> bool:
        return sum(e.kind == DELTA for e in events) >= 3
    await until(mid_reply, "the reply to start streaming")
    handle = client.get_workflow_handle(run)
    doomed = await holder(handle, workers)
    doomed.kill9()
    killed_at = asyncio.get_running_loop().time()
    shown = await term.wait_for("chat", "[exit ", timeout=120)
    thread = ChatState.model_validate(await handle.query(ChatAgent.query_state))
    await asyncio.sleep(1)  # each reader's last poll
    return killed_at, thread, shown, doomed


def assert_told_fast_and_ended_on_the_reply(seen: dict[str, Seen], killed_at: float,
                                            thread: ChatState, events: list[StreamEvent],
                                            screen: str, unhandled: list[str],
                                            messages: Path) -> None:
    reply = thread.reply
    # (The first time each showed it after the kill: on a loaded host an attempt may have
    # been lost before, its task timed out, and retried too.)
    told = {name: next((round(t - killed_at, 2) for t in s.retrying if t >= killed_at), None)
            for name, s in seen.items()}
    print("retrying shown after (s):", told)
    assert all(t is not None and 0 <= t < 5 for t in told.values()), told
    discard = next(e for e in events if e.kind == DISCARD)
    assert discard.data["retrying"] is True and "lost" in discard.data["reason"]
    assert reply
    assert {name: s.text for name, s in seen.items() if name != "terminal"} == {
        name: reply for name in seen if name != "terminal"}
    assert "[exit 0]" in screen and f"] {reply}\n" in screen, screen[-3000:]
    assert [e.offset for e in events] == list(range(1, len(events) + 1))  # none lost or twice
    # Every attempt but the last was lost (the killed one; on a loaded host maybe one
    # before it), each discarded before the next one started; the last one's is the reply.
    at = {(e.kind, e.data.get("attempt")): e.offset for e in events
          if e.kind in (MODEL_STARTED, DISCARD)}
    starts = [e.data["attempt"] for e in events if e.kind == MODEL_STARTED]
    assert len(starts) >= 2 and [e.data["attempt"] for e in events if e.kind == DISCARD] == \
        starts[:-1], [e.kind for e in events]
    assert all(at[(DISCARD, lost)] < at[(MODEL_STARTED, then)]
               for lost, then in zip(starts, starts[1:], strict=False))
    assert any(e.kind == DELTA and e.data["attempt"] == starts[-2] for e in events)
    folded = Reply()
    for event in events:
        folded.take(event)
    assert folded.text == reply and folded.discarded == starts[:-1]
    # The thread holds one reply: the retry's.
    assert thread.turns == 1 and thread.answered == 1 and thread.window is not None
    assert thread.window.messages == 2  # the user's message and one reply
    store = MessageStore(messages)
    kept = store.get(store.get_window(thread.window)[1])
    assert [m.role for m in kept] == ["user", "assistant"] and kept[1].content == reply
    assert unhandled == []


async def test_a_chat_worker_killed_mid_reply_is_shown_retrying_within_five_seconds(
    client: Client, task_queue: str, db_path: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TOWER_STREAMS", str(db_path.with_name("streams.sqlite")))
    assert_told_fast_and_ended_on_the_reply(
        *await kill_mid_reply(client, task_queue, db_path, tmp_path),
        messages=db_path.with_name("messages.sqlite"))


async def test_a_thread_keeps_its_short_task_timeout_across_continue_as_new(
    client: Client, task_queue: str, scripted_worker: WorkerFactory,
) -> None:
    """Tower's start sets it; each continued run has it too (the server carries it on), so
    a thread days old is watched as closely as a new one."""
    config = ChatConfig(continue_as_new_after=40)
    paced = ModelSettings(scripted_tokens_per_second=3)
    per_turn = {}
    async with scripted_worker(models=paced):
        for timeout in (ChatAgent.task_timeout, timedelta(seconds=10)):
            handle = await start_run(client, ChatAgent, ChatInput(config=config),
                                     id=f"chat-{uuid.uuid4().hex[:8]}", task_queue=task_queue,
                                     task_timeout=timeout)
            before = len((await handle.fetch_history()).events)
            began = asyncio.get_running_loop().time()
            await handle.execute_update(ChatAgent.send, UserMessage(text="hello there"))
            took = asyncio.get_running_loop().time() - began
            events = (await handle.fetch_history()).events[before:]
            per_turn[timeout.seconds] = (len(events), round(took, 1), sum(
                e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED for e in events))
            if timeout != ChatAgent.task_timeout:
                break
            while (await handle.describe()).run_id == handle.first_execution_run_id:
                await handle.execute_update(ChatAgent.send, UserMessage(text="and again"))
            latest = client.get_workflow_handle(handle.id)
            started = (await latest.fetch_history()).events[0]
            attributes = started.workflow_execution_started_event_attributes
            assert attributes.continued_execution_run_id == handle.first_execution_run_id
            assert attributes.workflow_task_timeout.ToTimedelta() == ChatAgent.task_timeout
            await latest.execute_update(ChatAgent.close)
    # What it costs: a workflow task each ~2.4 s a local call runs, not each 8 s.
    print("(events, seconds, tasks) a turn adds, by task timeout (s):", per_turn)


async def test_only_an_agent_that_asks_for_a_short_task_timeout_gets_one(
    client: Client, task_queue: str,
) -> None:
    """A gated agent's runs keep the server's 10 s: a short one would time out more of
    their tasks on a loaded host, for nothing (no local model call to watch)."""
    runs: list[tuple[type[Any], Any, timedelta]] = [
        (RefundAgent, RefundRequest(message="Please refund $1,200 on invoice INV-2004"),
         timedelta(seconds=10)),
        (ChatAgent, ChatInput(), timedelta(seconds=3))]
    for agent, request, expected in runs:
        name = agent.machine.name
        handle = await start_run(client, agent, request, id=f"{name}-{uuid.uuid4().hex[:8]}",
                                 task_queue=f"nobody-{uuid.uuid4().hex[:8]}")
        try:
            started = (await handle.fetch_history()).events[0]
            timeout = started.workflow_execution_started_event_attributes.workflow_task_timeout
            assert timeout.ToTimedelta() == expected, name
        finally:
            await handle.terminate("test over")


pytestmark = [pytest.mark.timeout(300), pytest.mark.long]


@pytest.mark.browser
async def test_the_inbox_run_page_shows_a_lost_attempt_within_five_seconds(
    client: Client, task_queue: str, db_path: Path, tmp_path: Path, browser: Browser,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TOWER_STREAMS", str(db_path.with_name("streams.sqlite")))
    assert_told_fast_and_ended_on_the_reply(
        *await kill_mid_reply(client, task_queue, db_path, tmp_path, page=browser),
        messages=db_path.with_name("messages.sqlite"))

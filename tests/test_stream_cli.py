"""`tower chat` and `tower run` show the model's text as it forms: with --json, each event
of the run's stream as one line, the deltas adding up to the reply; on the real dev
server, with the CLI in its own process reading the worker's stream store."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

from chatkit import say
from conftest import WorkerFactory
from temporalio.testing import WorkflowEnvironment
from test_cli import address_of, cli_env
from test_faults_process import until
from towercli import tower_cli

from tower.activities.model import ModelSettings
from tower.activities.streams import open_streams
from tower.contract.stream import DELTA, MODEL_FINISHED, MODEL_STARTED, stream_name
from workflows.chat import ChatAgent, ChatInput


async def streamed_tower(address: str, db_path: Path, *args: str) -> tuple[int, str, str]:
    env = {**cli_env(address), "TOWER_STREAMS": str(db_path.with_name("streams.sqlite"))}
    return await tower_cli(list(args), env=env)


async def test_tower_chat_json_shows_each_delta_then_the_reply(
    env: WorkflowEnvironment, task_queue: str, db_path: Path, scripted_worker: WorkerFactory
) -> None:
    async with scripted_worker(models=ModelSettings(scripted_tokens_per_second=200)):
        code, out, err = await streamed_tower(
            address_of(env), db_path, "chat", "--task-queue", task_queue, "--json",
            "-m", "hello there", "-m", "what is my status? ACC-1001")
    assert code == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    replies = [i for i, e in enumerate(events) if e["event"] == "reply"]
    assert len(replies) == 2 and events[0]["event"] == "started"
    start = 1
    for end in replies:  # each turn: its stream, then its reply
        turn = events[start:end]
        kinds = [e["event"] for e in turn]
        assert MODEL_STARTED in kinds and kinds.count(MODEL_FINISHED) == 1
        text = "".join(e["text"] for e in turn if e["event"] == DELTA)
        assert kinds.count(DELTA) > 1 and text == events[end]["reply"]
        offsets = [e["offset"] for e in turn]
        assert offsets == sorted(set(offsets))
        start = end + 1


async def test_tower_run_json_adds_the_model_events_to_its_transitions(
    env: WorkflowEnvironment, task_queue: str, db_path: Path, scripted_worker: WorkerFactory
) -> None:
    async with scripted_worker():
        code, out, err = await streamed_tower(
            address_of(env), db_path, "run", "account", "--task-queue", task_queue,
            "--input", '{"question": "Check my account ACC-1001"}', "--json")
    assert code == 0, err
    kinds = [json.loads(line)["event"] for line in out.splitlines()]
    assert kinds[0] == "started" and kinds[-1] == "end"
    assert MODEL_STARTED in kinds and MODEL_FINISHED in kinds and "transition" in kinds


async def test_tower_chat_thread_shows_the_reply_in_flight_then_the_last_one_it_missed(
    env: WorkflowEnvironment, task_queue: str, db_path: Path, scripted_worker: WorkerFactory
) -> None:
    """Attached while another client's message is being answered: the reply forms, then
    `caught_up` holds it whole; attached later: the last reply, which it missed."""
    store = open_streams(store_path(db_path))
    async with scripted_worker(models=ModelSettings(scripted_tokens_per_second=2)):
        handle = await env.client.start_workflow(
            ChatAgent.run, ChatInput(), id=f"chat-{uuid.uuid4().hex[:8]}", task_queue=task_queue)
        sending = asyncio.create_task(say(env.client, handle, "what is my status? ACC-1001"))
        name = stream_name(env.client.namespace, handle.id)

        async def forming() -> bool:
            return any(e.kind == DELTA for e in store.read(name))
        await until(forming, "the reply to start forming")
        code, out, err = await tower_cli(["chat", handle.id, "--json"], stdin="", env={
            **cli_env(address_of(env)), "TOWER_STREAMS": str(store_path(db_path))})
        said = await sending
        assert code == 0, err
        code, later, err = await streamed_tower(address_of(env), db_path, "chat", handle.id,
                                                "--json", "--close")
        assert code == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    assert any(e["event"] == DELTA for e in events), out  # it formed on screen
    assert events[-1] == {"event": "caught_up", "text": said.reply, "state": "finished"}
    assert json.loads(later.splitlines()[0]) == {"event": "last_reply", "text": said.reply}


def store_path(db_path: Path) -> Path:
    return db_path.with_name("streams.sqlite")

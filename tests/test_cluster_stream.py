"""A run's live stream with the worker and the client on different hosts, on the cluster
tier (two `temporal-server` processes sharing PostgreSQL; tests/clusterkit.py).

"Different hosts" here means different processes that share no filesystem state: the
worker (`python worker.py`, on one server process) keeps its stream in a database of its
own on the cluster's PostgreSQL; the client is `tower chat --json`, run from another
working directory that holds its own copy of the project's code, through the other
server process. The two have nothing in common but the servers' addresses, the
PostgreSQL URL and the codec key (a secret passed in the environment, not a file); the
test checks that no stream file was written on either side.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from clusterkit import TOWER, Cluster
from procs import REPO

from tower.activities.streams import open_streams
from tower.cli.agents import scripted_reply
from tower.contract.stream import (
    DELTA,
    DISCARD,
    MODEL_FINISHED,
    MODEL_STARTED,
    RUN_END,
    TOOL_FINISHED,
    TOOL_STARTED,
    TRANSITION,
    stream_name,
)
from tower.testing.model_server import LoopbackModelServer

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]
ASK = "search docs streaming"  # the chat's scripts: a search_docs call, then a text reply


def client_host(root: Path, cluster: Cluster, streams: str) -> dict[str, str]:
    """The client's folder (a copy of the project's code, nothing else) and its whole
    environment: the server address, the PostgreSQL URL and the codec key."""
    for package in ("workflows", "activities"):
        shutil.copytree(REPO / package, root / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    keys = Path(cluster.env["TOWER_CODEC_KEYS_FILE"]).read_text().strip()
    return {"PATH": os.environ["PATH"], "HOME": str(root), "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1", "TEMPORAL_ADDRESS": cluster.servers[1].address,
            "TOWER_STREAMS": streams, "TOWER_CODEC_KEYS": keys}


async def line_of(proc: asyncio.subprocess.Process) -> dict[str, Any] | None:
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 300)
    return json.loads(line) if line else None


async def test_a_client_on_another_host_reads_the_reply_as_it_forms_and_every_event_once(
    cluster: Cluster, tmp_path: Path,
) -> None:
    streams = cluster.database("tower_streams")
    queue = f"stream-{uuid.uuid4().hex[:6]}"
    worker_host, client_root = cluster.logs / queue, tmp_path / "client-host"
    worker_host.mkdir()
    client_root.mkdir()
    env = client_host(client_root, cluster, streams)
    with LoopbackModelServer(replies=scripted_reply) as model:
        held = model.hold()  # the text reply stops after its first word until released
        worker = cluster.worker(0, queue, model.base_url, queue, TOWER_STREAMS=streams,
                                TOWER_DB=str(worker_host / "tools.db"),
                                TOWER_PAYLOAD_DIR=str(worker_host / "payloads")).start()
        proc = None
        try:
            await cluster.until_polled(queue, 1)
            proc = await asyncio.create_subprocess_exec(
                TOWER, "chat", "--json", "--task-queue", queue, "--timeout", "300",
                "-m", ASK, "--close", cwd=client_root, env=env,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            # Up to the reply's first word, while the model holds the rest back.
            before: list[dict[str, Any]] = []
            while not before or before[-1]["event"] != DELTA:
                line = await line_of(proc)
                assert line is not None, before
                before.append(line)
            seen = [e["event"] for e in before]
            assert MODEL_FINISHED in seen  # the search_docs call's, whole
            assert seen.count(MODEL_STARTED) == seen.count(MODEL_FINISHED) + 1, seen
            assert "reply" not in seen
            held.set()
            after = []
            while (line := await line_of(proc)) is not None:
                after.append(line)
            assert await asyncio.wait_for(proc.wait(), 120) == 0, \
                (await proc.stderr.read()).decode() if proc.stderr else ""
        finally:
            held.set()
            if proc is not None and proc.returncode is None:
                proc.kill()
                await proc.wait()
            worker.stop()
    lines = before + after
    thread = lines[0]["thread"]
    assert lines[0]["event"] == "started" and lines[-1]["event"] == "closed", lines
    events = [e for e in lines if "offset" in e]
    # Every event of the thread, once, in order, none skipped, ending with the run.
    assert [e["offset"] for e in events] == list(range(1, len(events) + 1))
    assert events[-1]["event"] == RUN_END and events[-1]["status"] == "DONE"
    assert lines.index(events[-1]) == len(lines) - 2  # then `closed`
    # Exactly what the worker wrote to PostgreSQL.
    store = open_streams(streams)
    try:
        stored = store.read(stream_name("default", thread))
    finally:
        store.close()
    assert [{"event": e.kind, "run": thread, **e.as_json()} for e in stored] == events
    kinds = [e["event"] for e in events]
    assert DISCARD not in kinds
    assert kinds.count(TOOL_STARTED) == kinds.count(TOOL_FINISHED) == 1
    assert kinds.count(MODEL_STARTED) == kinds.count(MODEL_FINISHED) == 2
    steps = [e["step"] for e in events if e["event"] == TRANSITION]
    assert steps == list(range(steps[0], steps[0] + len(steps))) and len(steps) >= 3
    # The reply the update returned is the deltas that came, word by word.
    reply = next(e for e in lines if e["event"] == "reply")
    deltas = [e["text"] for e in events if e["event"] == DELTA]
    assert len(deltas) > 1 and "".join(deltas) == reply["reply"]
    assert reply["reply"].startswith("The docs have")
    # No stream file on either host: the stream went through PostgreSQL alone.
    assert not list(client_root.rglob("*.sqlite")), list(client_root.rglob("*"))
    assert not (worker_host / "streams.sqlite").exists()
    assert worker.unhandled() == []

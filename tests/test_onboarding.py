"""onboarding end to end on the real dev server (scripted model), plus its pure checks."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from workerkit import final_state

from activities.tools import TOOLS, ToolsDb
from tower.activities.model import ModelSettings
from tower.contract.wire import ToolCall
from tower.core.engine import Transition
from worker import build_worker
from workflows.onboarding import (
    GRAPH,
    ContactInfo,
    OnboardingAgent,
    OnboardingRequest,
    OnboardingState,
    both_checks_passed,
    details_complete,
)

SCRIPTED = ModelSettings()


async def _run(client: Client, task_queue: str, db_path: Path, message: str):
    async with build_worker(client, task_queue=task_queue, db_path=db_path, models=SCRIPTED):
        handle = await client.start_workflow(
            OnboardingAgent.run, OnboardingRequest(message=message),
            id=f"onboarding-{uuid.uuid4().hex[:8]}", task_queue=task_queue)
        state = await final_state(handle, OnboardingState)
        log = await handle.query("transitions", result_type=list[Transition])
        history = await handle.fetch_history()
    scheduled = [e.activity_task_scheduled_event_attributes.activity_type.name
                 for e in history.events
                 if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    return state, [(t.source, t.target) for t in log], scheduled


def _count(db_path: Path, sql: str, *args: object) -> int:
    with sqlite3.connect(db_path) as db:
        return int(db.execute(sql, args).fetchone()[0])


async def test_valid_details_provision_exactly_once(
    client: Client, task_queue: str, db_path: Path
) -> None:
    state, moves, scheduled = await _run(
        client, task_queue, db_path,
        "Hi, I'm Ada Byron from Analytical Engines, e-mail ada@engines.io")
    assert state.status == "DONE", state.errors
    assert moves == [("START", "collect_info"), ("collect_info", "validate"),
                     ("validate", "provision"), ("provision", "DONE")]
    assert state.contact == ContactInfo(name="Ada Byron", email="ada@engines.io",
                                        company="Analytical Engines")
    assert state.checks == {"validate_email": True, "check_company": True}
    assert state.account_id == "ACC-1004" and state.welcome_message_id == "MSG-1"
    # Each provisioning tool ran once, and only in provision.
    assert scheduled.count("create_account") == 1 and scheduled.count("send_welcome_email") == 1
    assert _count(db_path, "SELECT COUNT(*) FROM accounts WHERE email=?", "ada@engines.io") == 1
    assert _count(db_path, "SELECT COUNT(*) FROM outbox WHERE to_addr=?", "ada@engines.io") == 1
    assert _count(db_path, "SELECT COUNT(*) FROM tower_effects WHERE result IS NOT NULL") == 2


async def test_invalid_email_goes_back_to_collect_info(
    client: Client, task_queue: str, db_path: Path
) -> None:
    state, moves, _ = await _run(
        client, task_queue, db_path,
        "I'm Grace Hopper from Compiler Works, email grace@navy.invalid or grace@cobol.dev")
    assert state.status == "DONE", state.errors
    assert moves == [("START", "collect_info"), ("collect_info", "validate"),
                     ("validate", "collect_info"), ("collect_info", "validate"),
                     ("validate", "provision"), ("provision", "DONE")]
    assert state.rejected == ["grace@navy.invalid"]
    assert state.contact.email == "grace@cobol.dev"
    assert _count(db_path, "SELECT COUNT(*) FROM accounts WHERE email=?", "grace@cobol.dev") == 1


async def test_cycle_is_bounded_and_nothing_is_provisioned(
    client: Client, task_queue: str, db_path: Path
) -> None:
    state, moves, scheduled = await _run(
        client, task_queue, db_path, "I'm Alan Turing from Bletchley, email alan@hut8.test")
    assert state.status == "FAILED"
    assert moves[-2:] == [("collect_info", "give_up"), ("give_up", "FAILED")]
    assert state.visits["collect_info"] == 3
    assert any("loop budget exceeded" in e for e in state.errors)
    assert "create_account" not in scheduled and "send_welcome_email" not in scheduled
    assert _count(db_path, "SELECT COUNT(*) FROM tower_effects WHERE result IS NOT NULL") == 0


def test_blocked_company_fails_the_company_check(tmp_path: Path) -> None:
    box = ToolsDb(tmp_path / "t.sqlite")
    out = box.call(TOOLS["check_company"], ToolCall(
        tool="check_company", arguments={"company": "Shady  Holdings"}, idempotency_key="k"))
    assert out["valid"] is False and "sanctions" in out["reason"]
    taken = box.call(TOOLS["validate_email"], ToolCall(
        tool="validate_email", arguments={"email": "ada@example.com"}, idempotency_key="k2"))
    assert taken["valid"] is False and "already registered" in taken["reason"]


def test_provisioning_tools_act_once_per_key(tmp_path: Path) -> None:
    box = ToolsDb(tmp_path / "t.sqlite")
    call = ToolCall(tool="create_account", idempotency_key="run/1/3/1",
                    arguments={"name": "Kay", "email": "kay@x.dev", "company": "Xerox Parc"})
    first = box.call(TOOLS["create_account"], call)
    again = box.call(TOOLS["create_account"], call)  # a retried activity
    assert first == again
    with sqlite3.connect(tmp_path / "t.sqlite") as db:
        rows = db.execute("SELECT COUNT(*) FROM accounts WHERE email='kay@x.dev'").fetchone()
    assert rows == (1,)


def test_each_state_sees_only_its_own_tools_and_exit_checks_are_code() -> None:
    assert GRAPH.nodes["collect_info"].tools == ()
    assert GRAPH.nodes["validate"].tools == ("validate_email", "check_company")
    assert GRAPH.nodes["provision"].tools == ("create_account", "send_welcome_email")
    partial = OnboardingState(contact=ContactInfo(name="A", email="a@b.io", company=" "))
    assert not details_complete(partial)
    assert details_complete(partial.model_copy(update={"contact": ContactInfo(
        name="A", email="a@b.io", company="B")}))
    assert not both_checks_passed(OnboardingState(checks={"validate_email": True}))
    assert both_checks_passed(OnboardingState(checks={"validate_email": True,
                                                      "check_company": True}))

"""A decision signed with a key added since the run last read its roster survives a flood
(issue 24), on a real dev server with real signatures.

The run's roster read is held up (the worker's ``read_trust`` waits on an event) while an
attacker floods the run with junk ``decision`` signals: under key ids no roster names, and
over a workflow task's signature budget. Meanwhile erin is enrolled and her decision, signed
with her new key, is sent as a signal in the middle of the flood. Before, one junk decision
under an unknown key took the single place kept for a roster read and erin's was refused
"unknown key id"; and the read judged the kept one against a budget the flood had spent
("unverified"). Now up to UNKNOWN_KEEP wait, in the order they came, and are judged after the
read with the held ones, as far as each task's budget goes.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gatekit import decision, refunds, tamper, task_failures
from temporalio.client import Client
from temporalio.worker import Replayer
from test_trust_refresh import deployment, parked

import tower.activities.trust
from tower.activities.model import ModelSettings
from tower.activities.trust import TrustError
from tower.cli.trust_files import enrol
from tower.client.keys import load_key, new_key
from tower.temporal import TowerPlugin
from tower.temporal._gate import UNKNOWN_FULL, UNKNOWN_KEEP
from worker import build_worker
from workflows.registry import AGENTS

pytestmark = [pytest.mark.integration, pytest.mark.long]

BATCH = 25  # signals sent at once while nothing is held: within a task's budget (50)


class Roster:
    """The worker's roster reads, held up on demand: ``hold()``, then ``reading`` is set
    once a read is waiting, and ``release()`` lets it (and every later one) read the files,
    or with ``fail`` set, lets the next one fail as an unreadable roster does."""

    def __init__(self) -> None:
        self.open, self.reading = threading.Event(), threading.Event()
        self.open.set()
        self.fail = False

    def hold(self) -> None:
        self.reading.clear()
        self.open.clear()

    def release(self) -> None:
        self.open.set()


@pytest.fixture
def roster(monkeypatch: pytest.MonkeyPatch) -> Iterator[Roster]:
    gate, real = Roster(), tower.activities.trust.read_trust

    def read(root: Path, tenant: str) -> Any:
        if not gate.open.is_set():
            gate.reading.set()
            gate.open.wait(timeout=120)  # an activity thread of the test's worker
        if gate.fail:
            gate.fail = False
            raise TrustError(f"roster.json for tenant {tenant!r} is not readable (the test)")
        return real(root, tenant)  # what the directory holds once released

    monkeypatch.setattr(tower.activities.trust, "read_trust", read)
    yield gate
    gate.release()


def unknown(client: Client, run: str, pending: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """``n`` decisions an attacker can make under key ids no roster names, claiming alice."""
    return [decision(client, run, pending, key=new_key()) for _ in range(n)]


def over_budget(client: Client, run: str, pending: dict[str, Any], n: int,
                alice: dict[str, Any]) -> list[dict[str, Any]]:
    """``n`` junk decisions of every kind: unknown key ids, a key claiming alice's id, a
    raised amount under her signature (``alice``: her key), garbage."""
    kinds = [
        lambda: decision(client, run, pending, key=new_key()),
        lambda: decision(client, run, pending, key={**new_key(), "kid": alice["kid"]}),
        lambda: tamper(decision(client, run, pending, key=alice),
                       edits={"amount_cents": 99_999_900}),
        lambda: {"token": "a.b.c"},
    ]
    return [kinds[i % len(kinds)]() for i in range(n)]


async def approvals(handle: Any) -> dict[str, Any]:
    info: dict[str, Any] = await handle.query("approvals", result_type=dict)
    return info


async def until(handle: Any, done: Any) -> dict[str, Any]:
    """The run's approvals once ``done(approvals)`` holds (each signal is taken in a task)."""
    async with asyncio.timeout(60):
        while not done(info := await approvals(handle)):
            await asyncio.sleep(0.1)
    return info


async def signal_judged(handle: Any, payloads: list[dict[str, Any]]) -> None:
    """Send ``payloads`` in batches a task judges at once (nothing held): each batch only
    once the run has taken the one before (kept for the roster read, or refused)."""
    for start in range(0, len(payloads), BATCH):
        before = await approvals(handle)
        assert before["held"] == 0
        batch = payloads[start:start + BATCH]
        await asyncio.gather(*(handle.signal("decision", p) for p in batch))
        seen = before["waiting_for_roster"] + before["refused_total"] + len(batch)
        await until(handle, lambda i, n=seen: i["waiting_for_roster"] + i["refused_total"] == n)


async def flood_past_the_budget(client: Client, handle: Any, pending: dict[str, Any],
                                alice: dict[str, Any]) -> int:
    """Junk sent all at once until some arrived past a task's budget and is held (each burst
    lands in as few tasks as the worker makes of it); how many were sent. At most two
    bursts: the run stays under the 500 signals after which it carries over."""
    sent = 0
    for _ in range(2):
        burst = over_budget(client, handle.id, pending, 200, alice)
        await asyncio.gather(*(handle.signal("decision", p) for p in burst))
        sent += len(burst)
        if (await approvals(handle))["held"] > 0:
            return sent
    raise AssertionError("no burst went past a task's signature budget")


async def read_held_up(handle: Any, roster: Roster, info: dict[str, Any]) -> None:
    """Hold the roster's reads and have the run begin one (asked for, at most 5 s after its
    last): it waits in the worker while the test floods the run."""
    roster.hold()
    await handle.signal("refresh_trust")
    await asyncio.to_thread(roster.reading.wait, 60)
    assert roster.reading.is_set(), "the run did not re-read its roster"
    assert (await approvals(handle))["refreshed_at"] == info["refreshed_at"]


async def finish(client: Client, handle: Any, roster: Roster, db_path: Path, junk: int,
                 ) -> dict[str, Any]:
    """Release the read; the run ends approved by erin, every junk decision refused into
    the audit trail, nothing paid but the refund once, no workflow task failed; its history
    replays on this code."""
    roster.release()
    final = await handle.result()
    assert final.status == "DONE"
    assert [(a.status, a.decision and a.decision.approver) for a in final.approvals] == [
        ("approved", "erin")]
    assert refunds(db_path) == [("INV-2004", 120000)]
    info = await approvals(handle)
    assert info["refused_total"] == junk and info["held"] == info["waiting_for_roster"] == 0
    history = await handle.fetch_history()
    assert task_failures(history) == []
    await Replayer(workflows=list(AGENTS.values()), plugins=[TowerPlugin()]).replay_workflow(
        history)
    return info


async def test_a_new_keys_decision_in_a_flood_is_accepted_after_the_roster_read(
    client: Client, task_queue: str, db_path: Path, tmp_path: Path, roster: Roster,
) -> None:
    """60 junk decisions under unknown keys, then erin's (her key enrolled meanwhile), then
    bursts of junk of every kind past a task's budget, all while the run's roster read is
    held up. Released: they all came while that read was under way, so the next read (asked
    for, 5 s after) has the 61 judged, in order, 50 a task: erin's in the second task after
    it, accepted; every junk one refused."""
    trust, config = deployment(tmp_path, client)
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings(), trust_dir=trust):
        handle, info = await parked(client, task_queue)
        pending = info["pending"]
        await read_held_up(handle, roster, info)
        await signal_judged(handle, unknown(client, handle.id, pending, 60))
        enrol(trust, client.namespace, "erin", config=config, roles=["manager"])
        erin = decision(client, handle.id, pending, approver="erin",
                        key=load_key("erin", config))
        await handle.signal("decision", erin)
        await until(handle, lambda i: i["waiting_for_roster"] == 61)
        flooded = await flood_past_the_budget(client, handle, pending,
                                              load_key("alice", config))
        during = await approvals(handle)
        assert during["waiting_for_roster"] >= 61 and during["held"] > 0
        assert refunds(db_path) == [] and during["records"] == info["records"]
        audit = await finish(client, handle, roster, db_path, 60 + flooded)
    assert not any("unverified" in r["reason"] for r in audit["refused"]), audit["refused"]


async def test_junk_past_the_bound_after_the_genuine_decision_cannot_push_it_out(
    client: Client, task_queue: str, db_path: Path, tmp_path: Path, roster: Roster,
) -> None:
    """10 junk decisions under unknown keys, erin's, then UNKNOWN_KEEP + 20 more: the run
    keeps UNKNOWN_KEEP and refuses the rest as they come ("not kept"), never one that came
    before them. Released: erin's is accepted."""
    trust, config = deployment(tmp_path, client)
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings(), trust_dir=trust):
        handle, info = await parked(client, task_queue)
        pending = info["pending"]
        await read_held_up(handle, roster, info)
        await signal_judged(handle, unknown(client, handle.id, pending, 10))
        enrol(trust, client.namespace, "erin", config=config, roles=["manager"])
        await handle.signal("decision", decision(client, handle.id, pending, approver="erin",
                                                 key=load_key("erin", config)))
        await until(handle, lambda i: i["waiting_for_roster"] == 11)
        after = UNKNOWN_KEEP + 20
        await signal_judged(handle, unknown(client, handle.id, pending, after))
        during = await approvals(handle)
        turned_away = 11 + after - UNKNOWN_KEEP
        assert during["waiting_for_roster"] == UNKNOWN_KEEP
        assert during["refused_total"] == turned_away
        assert all(r["reason"].startswith("unknown key id") and r["reason"].endswith(
            UNKNOWN_FULL) for r in during["refused"])
        assert refunds(db_path) == [] and during["records"] == info["records"]
        await finish(client, handle, roster, db_path, 10 + after)


async def test_a_failed_roster_read_refuses_what_waited_for_it_and_the_run_goes_on(
    client: Client, task_queue: str, db_path: Path, tmp_path: Path, roster: Roster,
) -> None:
    """The read that decisions under unknown keys wait for fails (after the activity's
    retries: here at once, an unreadable roster): they are refused, saying so, instead of
    waiting for the next timed read (an hour) and keeping the run from carrying over. The
    run still waits at its gate, nothing paid; alice's decision is then accepted."""
    trust, config = deployment(tmp_path, client)
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings(), trust_dir=trust):
        handle, info = await parked(client, task_queue)
        pending = info["pending"]
        await read_held_up(handle, roster, info)
        await signal_judged(handle, unknown(client, handle.id, pending, 5))
        assert (await approvals(handle))["waiting_for_roster"] == 5
        roster.fail = True
        roster.release()
        after = await until(handle, lambda i: i["waiting_for_roster"] == 0)
        assert after["records"] == info["records"] and refunds(db_path) == []
        # The failed read itself is in the audit trail, then the five it refused.
        failed, *refused = after["refused"]
        assert failed["reason"].startswith("roster refresh failed") and len(refused) == 5
        assert all("the roster could not be read again" in r["reason"] and "not readable"
                   in r["reason"] for r in refused), refused
        await handle.signal("decision", decision(client, handle.id, pending,
                                                 key=load_key("alice", config)))
        final = await handle.result()
        assert task_failures(await handle.fetch_history()) == []
    assert [(a.status, a.decision and a.decision.approver) for a in final.approvals] == [
        ("approved", "alice")]
    assert refunds(db_path) == [("INV-2004", 120000)]

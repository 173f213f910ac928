"""Every refusal carries a code (tower.contract.failures.Code), and surfaces read the
code, never the words: the update's error, the audit trail of refused signals, the client's
DecisionRefused, the inbox's text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gatekit import decide, decision, new_id, refund_request, refunds, wait_pending
from temporalio.client import Client

from tower.activities.model import ModelSettings
from tower.cli.inbox.pages import refusal_text
from tower.client import DecisionRefused
from tower.client._decisions import send_decision
from tower.contract.failures import Code
from worker import build_worker
from workflows.refund import RefundAgent


async def refused_code(client: Client, run: str, payload: dict[str, Any]) -> Code | None:
    with pytest.raises(DecisionRefused) as info:
        await send_decision(client, run, payload)
    return info.value.code


async def test_the_run_names_each_refusal_by_its_code(
    client: Client, task_queue: str, db_path: Path
) -> None:
    run = new_id("refund")
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings()):
        handle = await client.start_workflow(RefundAgent.run, refund_request(client, run),
                                             id=run, task_queue=task_queue)
        p = (await wait_pending(handle))["pending"]
        # Updates: refused by the validator, the code in the error's details.
        cases = {
            Code.WRONG_PROPOSAL: decision(client, run, p, proposal="sha256:" + "1" * 64),
            Code.WRONG_REQUEST: decision(client, run, p, request=p["step"] - 1),
            Code.WRONG_RUN: decision(client, run, p, run_id="another-run-id"),
            Code.NOT_AUTHORIZED: decision(client, run, p, approver="carol",
                                                 role="clerk"),
            Code.MALFORMED: {"token": "not-a-jws"},
            Code.POLICY: decision(client, run, p, unsigned=True),
        }
        for code, payload in cases.items():
            assert await refused_code(client, run, payload) == code
        # Signals: refused into the audit trail, each with its code.
        await handle.signal("decision", decision(client, run, p, request=p["step"] + 5))
        await handle.signal("decision", "not an object")
        await handle.signal("nonsense", {})
        seen: list[Any] = []
        while len(seen) < 3:
            seen = (await handle.query("approvals", result_type=dict))["refused"]
        assert [r["code"] for r in seen[-3:]] == ["wrong_request", "malformed",
                                                  "unknown_signal"]
        # Nothing refused changed anything: the same request waits, nothing was paid.
        assert (await handle.query("approvals", result_type=dict))["pending"] == p
        assert refunds(db_path) == []
        first = decision(client, run, p)
        assert (await decide(client, handle, p, decision_id="d-first"))["result"] == "approved"
        # Too late: the request was decided.
        assert await refused_code(client, run, first) == Code.ALREADY_DECIDED
        await handle.result()
    assert len(refunds(db_path)) == 1


@pytest.mark.parametrize(("code", "reason", "says"), [
    # The words say one thing, the code another: the page follows the code.
    (Code.EXPIRED, "gate 'x' was already decided", "the request expired"),
    (Code.ALREADY_DECIDED, "a note that says expired", "Already decided"),
    (Code.WRONG_PROPOSAL, "already decided? expired?", "Refused by the run"),
    (None, "already decided, expired", "Refused by the run"),
])
def test_the_inbox_words_a_refusal_by_its_code(code: Code | None, reason: str,
                                               says: str) -> None:
    text = refusal_text(DecisionRefused(reason, code=code))
    assert says in text and reason in text

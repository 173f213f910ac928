"""`tower eval` and ``tower.testing.evals``: recorded runs re-run against candidate code.

Each eval starts its own dev server (never the session's); the candidates are the
example's agents with one change each (tests/eval_candidates.py), never an edit of
the example. Unchanged code on every recorded run: tests/test_cli_eval.py, through the CLI.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from eval_candidates import RefundWideGate, SupportBillingDown, SupportLoginAccount
from gatekit import (
    ROSTER_RECHECK,
    decide,
    recorded,
    refund_request,
    refunds,
    snapshot,
    wait_pending,
)
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.worker import Worker
from workerkit import activities

from tower.activities.model import ModelSettings
from tower.activities.scripted import scripted_reply
from tower.client._decisions import submit_decision
from tower.contract.decisions import GateRecord
from tower.contract.wire import ModelReply, ModelRequest
from tower.temporal import TowerPlugin, WorkerSettings
from tower.temporal._start import scripts_of
from tower.testing.evals import Change, EvalReport, Mode, assert_verdicts, run_eval
from tower.testing.evals.runner import EvalTrust
from tower.testing.model_server import LoopbackModelServer
from worker import build_worker
from workflows.refund import RefundRequest
from workflows.registry import AGENTS

pytestmark = pytest.mark.long

HISTORIES = Path(__file__).parent / "histories"


def candidate(*classes: type) -> Any:
    """A build_worker for the example's worker with ``classes`` in place of the agents of
    the same names: the candidate code an eval runs."""
    def build(client: Client, *, task_queue: str, db_path: Path, trust_dir: Path,
              interceptors: Sequence[Any], models: ModelSettings | None = None) -> Worker:
        swapped = {**AGENTS, **{c.machine.name: c for c in classes}}  # type: ignore[attr-defined]
        agents = list(swapped.values())
        return Worker(client, task_queue=task_queue, workflows=agents, interceptors=interceptors,
                      activities=activities(agents, db_path=db_path),
                      plugins=[TowerPlugin(settings=WorkerSettings(
                          models=models or ModelSettings(), trust_dir=trust_dir,
                          messages=db_path.with_name("messages.sqlite"),
                          streams=db_path.with_name("streams.sqlite")))])
    return build


def verdicts(report: EvalReport) -> dict[str, str]:
    return {r.workflow_id: r.verdict.value for r in report.runs}


def prompt_following(request: ModelRequest) -> ModelReply:
    """A live model that reads its prompt: told that login problems are account questions,
    it classifies them so; otherwise it answers as the scripted model does."""
    text = " ".join(m.content for m in request.messages if m.role == "user").lower()
    if request.node == "classify" and "Login and password" in request.system and "login" in text:
        return ModelReply(model="loopback", content=json.dumps({"category": "ACCOUNT"}))
    reply = scripted_reply(request, scripts_of(AGENTS.values()))
    return reply.model_copy(update={"model": "loopback"})


async def test_a_prompt_change_moves_exactly_the_runs_it_affects(tmp_path: Path) -> None:
    files = [HISTORIES / "support-1.json", HISTORIES / "support-2.json"]
    with LoopbackModelServer(replies=prompt_following) as server:
        live = ModelSettings(api_key="loopback", base_url=server.base_url, models=["m"],
                             timeout_seconds=10)
        report = await run_eval(*files, build_worker=candidate(SupportLoginAccount),
                                mode=Mode.CHANGED, models=live)
    assert verdicts(report) == {"support-1": "same", "support-2": "changed"}
    moved = report.runs[1]
    assert moved.candidate.trail == ["classify", "account_help", "DONE"]
    path = next(s for s in moved.scores if s.scorer == "path")
    assert "-classify->technical" in path.detail and "+classify->account_help" in path.detail
    # classify went live (its prompt changed); billing kept its recorded answers.
    assert report.runs[0].answered == {"live: prompt or model changed": 1, "recorded": 2}
    assert report.moved() == {"support": {("classify", "technical"): -1,
                                          ("technical", "DONE"): -1,
                                          ("classify", "account_help"): 1,
                                          ("account_help", "DONE"): 1}}


async def test_a_prompt_change_is_named_when_answers_are_recorded() -> None:
    """By default every answer comes from the recording, so the candidate's new prompt
    cannot change a path: it is named on each run whose node it touched, never silent."""
    files = [HISTORIES / "support-1.json", HISTORIES / "support-2.json"]
    report = await run_eval(*files, build_worker=candidate(SupportLoginAccount),
                            models=ModelSettings())
    assert verdicts(report) == {"support-1": "changed", "support-2": "changed"}
    for run in report.runs:
        assert run.candidate.trail == run.baseline.trail  # the recorded answers, replayed
        assert set(run.answered) == {"recorded"}
        assert [(s.scorer, s.verdict, s.detail) for s in run.scores] == [
            ("prompt", Change.CHANGED, "prompt of node classify changed; answers recorded "
                                       "(--models changed asks the model)")]


async def test_live_models_answer_every_call() -> None:
    files = [HISTORIES / "support-1.json", HISTORIES / "support-2.json"]
    with LoopbackModelServer(replies=prompt_following) as server:
        live = ModelSettings(api_key="loopback", base_url=server.base_url, models=["m"],
                             timeout_seconds=10)
        report = await run_eval(*files, build_worker=candidate(SupportLoginAccount),
                                mode=Mode.LIVE, models=live)
    assert verdicts(report) == {"support-1": "same", "support-2": "changed"}
    assert [r.answered for r in report.runs] == [{"live": 3}, {"live": 2}]
    assert report.runs[1].candidate.models == ["m"]  # the gateway's model, not a recording


async def record_refunds(client: Client, folder: Path, task_queue: str, db: Path) -> None:
    """Two more recorded refunds, under the limit ($300, $100): the runs a wider gate
    would catch, or not."""
    folder.mkdir()
    async with build_worker(client, task_queue=task_queue, db_path=db, models=ModelSettings()):
        for run, text in [("refund-300", "Please refund $300 on invoice INV-2004"),
                          ("refund-100", "Please refund $100 on invoice INV-2004")]:
            handle = await client.start_workflow(
                "refund", RefundRequest(message=text), id=f"{run}-{task_queue}",
                task_queue=task_queue, result_type=dict)
            await handle.result()
            (folder / f"{run}.json").write_text((await handle.fetch_history()).to_json())


async def test_a_graph_change_is_reported_with_the_runs_it_affects(
    client: Client, task_queue: str, tmp_path: Path,
) -> None:
    await record_refunds(client, tmp_path / "recorded", task_queue, tmp_path / "rec.sqlite")
    files = [*sorted((tmp_path / "recorded").glob("*.json")),
             HISTORIES / "refund-approved.json", HISTORIES / "refund-rejected.json"]
    report = await run_eval(*files, build_worker=candidate(RefundWideGate),
                            models=ModelSettings())
    by_id = {r.workflow_id.split("-tq-")[0]: r for r in report.runs}
    assert {k: r.verdict.value for k, r in by_id.items()} == {
        "refund-100": "same", "refund-300": "changed", "refund-approved": "same",
        "refund-rejected": "same"}
    caught = by_id["refund-300"]
    assert caught.baseline.status == "DONE" and caught.candidate.status == "AWAITING_APPROVAL"
    assert caught.candidate.gates == ["refund_review"] and not caught.baseline.gates
    assert any("decision needed at gate refund_review" in n for n in caught.notes)
    assert [s.scorer for s in caught.scores][:2] == ["status", "path"]
    # Nothing was paid in the candidate run: it waits for a manager.
    assert [t.name for t in caught.candidate.tool_calls] == ["invoice_balance"]


async def test_a_failing_node_is_a_regression() -> None:
    files = [HISTORIES / "support-1.json", HISTORIES / "support-2.json"]
    report = await run_eval(*files, build_worker=candidate(SupportBillingDown),
                            models=ModelSettings())
    assert verdicts(report) == {"support-1": "regressed", "support-2": "same"}
    status = report.runs[0].scores[0]
    assert status.scorer == "status" and status.verdict is Change.REGRESSED
    assert "DONE at DONE -> FAILED" in status.detail and "unreachable" in status.detail
    with pytest.raises(AssertionError, match="support-1: regressed, expected same"):
        assert_verdicts(report, Change.SAME)


async def test_a_decision_the_eval_signs_is_refused_by_a_real_run(
    client: Client, scripted_worker: Any, task_queue: str, db_path: Path, tmp_path: Path,
) -> None:
    """The eval re-signs recorded decisions with keys only its own roster trusts: one of
    them sent to a real run waiting at a gate changes nothing there (the run reads its
    roster once more, for a key enrolled since, and refuses it)."""
    run = f"refund-eval-attack-{task_queue}"
    async with scripted_worker():
        handle = await client.start_workflow("refund", refund_request(client, run), id=run,
                                             task_queue=task_queue)
        info = await wait_pending(handle)
        history, state = await recorded(handle), await snapshot(handle)
        world = EvalTrust(tmp_path / "eval-trust", client.namespace, {"alice": ["manager"]})
        forged = world.decision(run, GateRecord.model_validate(info["pending"]),
                                {"sub": "alice", "role": "manager", "verdict": "approve",
                                 "jti": "d-from-an-eval"})
        with pytest.raises(WorkflowUpdateFailedError):
            await submit_decision(handle, forged)
        now = await recorded(handle)
        assert now[:len(history)] == history and set(now[len(history):]) <= ROSTER_RECHECK
        assert await snapshot(handle) == state
        refused = (await handle.query("approvals", result_type=dict))["refused"]
        assert [r["code"] for r in refused] == ["unknown_key"], refused
        assert refunds(db_path) == []  # nothing paid
        outcome = await decide(client, handle, info["pending"])  # alice's real key still works
        assert outcome["result"] == "approved"

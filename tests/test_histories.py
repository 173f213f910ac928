"""Recorded histories replay against the current code; export and replay from the CLI."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from replaykit import replay
from temporalio.client import Client, WorkflowHistory
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer
from test_cli import address_of, tower

from tower.activities.model import ModelSettings
from tower.cli.demo import RUNS
from tower.cli.devserver import temporal_binary
from tower.core.engine import Transition
from tower.temporal._divergence import diverged
from tower.temporal.plugin import TowerPlugin
from tower.temporal.replay import history_files, load
from tower.testing import assert_replays
from worker import build_worker
from workflows.account import AccountAgent, AccountRequest
from workflows.registry import AGENTS

HISTORIES = Path(__file__).parent / "histories"


# The CI recipe from docs/debugging.md, applied to Tower's own recordings one test per file.
@pytest.mark.parametrize("path", history_files(HISTORIES), ids=lambda p: p.name)
async def test_history_replays(path: Path) -> None:
    (result,) = await assert_replays(path, workflows=list(AGENTS.values()))
    assert result.log, f"{path.name} replays to no transition at all"
    # inspect --step needs the state after every step: every move goes through _record.
    assert len(result.states) == len(result.log)


def test_every_agent_with_a_demo_input_is_recorded() -> None:
    recorded = {json.loads(p.read_text())["events"][0]["workflowExecutionStartedEventAttributes"]
                ["workflowType"]["name"] for p in history_files(HISTORIES)}
    demo_agents = {agent for agent, _, _ in RUNS}
    assert demo_agents <= set(AGENTS)
    missing = demo_agents - recorded
    assert not missing, f"re-run `python -m tests.record_histories`: {sorted(missing)}"


async def test_recordings_include_failed_gated_and_parked_runs() -> None:
    results = await replay(load([HISTORIES]))
    finals = {r.workflow_id: r.states[-1].status for r in results}
    assert {"DONE", "FAILED", "AWAITING_APPROVAL"} <= set(finals.values()), finals
    passed_a_gate = [r.workflow_id for r in results if r.states[-1].status == "DONE"
                     and any(s.status == "AWAITING_APPROVAL" for s in r.states)]
    assert passed_a_gate, "no recorded run went through an approval gate"


async def test_recordings_include_a_fallback_run() -> None:
    # Recorded with the primary model down: the backup's answers are in the history, so a
    # change to how fallbacks are recorded must still replay the runs that used one.
    results = await replay(load([HISTORIES / "order-fallback.json"]))
    (result,) = results
    calls = [call for t in result.log for call in t.calls if call.startswith("model:")]
    assert result.ok and result.states[-1].status == "DONE"
    assert calls and set(calls) == {"model:backup"}, calls


async def test_every_recorded_run_replays_under_any_id(
    env: WorkflowEnvironment, tmp_path: Path,
) -> None:
    """As a Temporal user replays in CI: the plain Replayer with `TowerPlugin`, whatever id
    it is given, and `tower replay` of the files renamed (a file's name is the id it
    replays under), in their subfolders as tests/histories/ has them: `tower replay` of a
    folder takes every history under it. A fan-out's children are named by what its history
    holds, not its id."""
    files = history_files(HISTORIES)
    replayer = Replayer(workflows=list(AGENTS.values()), plugins=[TowerPlugin()])
    renamed = tmp_path / "renamed"
    for i, path in enumerate(files):
        text = path.read_text()
        await replayer.replay_workflow(WorkflowHistory.from_json("any-id", text))
        folder = renamed / path.parent.relative_to(HISTORIES)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{path.stem.split('@')[0]}-renamed-{i}.json").write_text(text)
    assert any(p.is_dir() for p in renamed.iterdir())  # a subfolder (gates/) among them
    code, out, err = await tower(address_of(env), "replay", str(renamed))
    assert code == 0, out + err
    assert f"{len(files)} histories replayed: {len(files)} ok, 0 failed" in out, out
    approved = files.index(HISTORIES / "refund-approved.json")
    assert f"(id refund-approved-renamed-{approved}): 6 steps, at DONE" in out, out
    # A child the code names otherwise than the history is a divergence, named.
    recorded = (HISTORIES / "fanout-1.json").read_text()
    child = json.loads(recorded)["events"]
    first = next(e["startChildWorkflowExecutionInitiatedEventAttributes"]["workflowId"]
                 for e in child if "startChildWorkflowExecutionInitiatedEventAttributes" in e)
    (fanout,) = await replay([("f", WorkflowHistory.from_json(
        "any-id", recorded.replace(first, "elsewhere/research_all-1/0")))])
    assert fanout.failure == (
        "replay of run any-id diverged at step 1 (node research_all): the code now calls child "
        f"workflow {first} where the history has child workflow elsewhere/research_all-1/0")


async def test_tower_replay_of_bad_paths(env: WorkflowEnvironment, tmp_path: Path) -> None:
    """(`tower replay` of a folder: test_every_recorded_run_replays_under_any_id.)"""
    address = address_of(env)
    code, _, err = await tower(address, "replay", str(tmp_path / "nope"))
    assert code == 2 and "nope: no such file or folder" in err
    bogus = tmp_path / "bogus.json"
    bogus.write_text('{"events": "no"}')
    code, _, err = await tower(address, "replay", str(bogus))
    assert code == 2 and "bogus.json: not a Temporal history in JSON" in err


async def test_export_matches_temporal_cli_and_both_replay(
    env: WorkflowEnvironment, client: Client, task_queue: str, db_path: Path, tmp_path: Path,
) -> None:
    run = f"account-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings()):
        await client.execute_workflow(AccountAgent.run, AccountRequest(question="ACC-1001?"),
                                      id=run, task_queue=task_queue)
    address = address_of(env)
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    ours.mkdir()
    theirs.mkdir()
    code, out, err = await tower(address, "history", "export", run, "-o", str(ours))
    assert code == 0, err
    assert f"of {run} to {ours / (run + '.json')}" in out
    proc = await asyncio.create_subprocess_exec(
        temporal_binary(), "workflow", "show", "--workflow-id", run, "--output", "json",
        "--address", address, stdout=asyncio.subprocess.PIPE)
    shown, _ = await asyncio.wait_for(proc.communicate(), 60)
    (theirs / f"{run}.json").write_bytes(shown)
    assert json.loads((ours / f"{run}.json").read_text()) == json.loads(shown)
    code, out, _ = await tower(address, "replay", str(ours), str(theirs / f"{run}.json"))
    assert code == 0 and "2 histories replayed: 2 ok" in out, out
    code, _, err = await tower(address, "history", "export", "no-such-run")
    assert code == 2 and "run 'no-such-run' not found" in err


def test_a_different_path_is_reported_even_without_a_command_change() -> None:
    def t(step: int, target: str) -> Transition:
        return Transition(step=step, source="x", target=target, reason="",
                          at=datetime(2026, 1, 1, tzinfo=UTC))
    log = [t(1, "a"), t(2, "b"), t(3, "c")]
    assert diverged([(1, "a"), (3, "c")], log) == []  # published at some steps only
    assert diverged([(1, "a"), (2, "x")], log) == [
        "replay took a different path: the original run was at x after step 2, the current "
        "code is at b"]
    assert "replay stopped early" in diverged([(1, "a"), (4, "d")], log)[0]
    assert diverged([(7, "z"), (9, "d")], [t(9, "d")]) == []  # carried over from a run before

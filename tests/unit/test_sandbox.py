"""The worker's sandbox checks each workflow class once per process, and replay registers
only the agents its histories ran: replaying many histories (or building many workers)
stops paying a sandbox build per agent per batch. Runs keep every restriction."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from tower.cli.histories import load, replay
from tower.temporal import TowerPlugin
from tower.temporal import _sandbox as tower_sandbox
from workflows.registry import AGENTS

HISTORIES = Path(__file__).parent.parent / "histories"


async def test_each_agent_is_checked_once_and_only_the_agents_replayed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    checked: list[str] = []
    real = SandboxedWorkflowRunner.prepare_workflow

    def counting(self: SandboxedWorkflowRunner, defn: object) -> None:
        checked.append(defn.name)  # type: ignore[attr-defined]
        real(self, defn)  # type: ignore[arg-type]

    monkeypatch.setattr(SandboxedWorkflowRunner, "prepare_workflow", counting)
    monkeypatch.setattr(tower_sandbox, "_VALIDATED", set())
    histories = load([HISTORIES / "account-1.json", HISTORIES / "support-1.json"])
    for _ in range(3):  # three batches, as three `assert_replays` calls would be
        results = await replay(histories)
        assert [r.ok for r in results] == [True, True]
    assert sorted(checked) == ["account", "support"]  # once each, no other agent


def test_runs_keep_the_sandbox_restrictions() -> None:
    # What a replayer of the example's agents gets (a worker's is made the same way).
    config = TowerPlugin().configure_replayer({"workflows": list(AGENTS.values())})
    runner = config["workflow_runner"]
    assert isinstance(runner, SandboxedWorkflowRunner)
    restrictions = runner.restrictions
    # Only the engine and the project's packages beside its workflows (the tools' schemas,
    # the scripted answers) pass through, learned from where the agents live: agent code
    # is sandboxed.
    assert not restrictions.passthrough_all_modules
    assert {"tower", "activities"} <= restrictions.passthrough_modules
    assert "workflows" not in restrictions.passthrough_modules
    assert restrictions.invalid_module_members == (
        SandboxedWorkflowRunner().restrictions.invalid_module_members)

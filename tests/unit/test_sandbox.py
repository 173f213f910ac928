"""The worker's sandbox checks each workflow class once per process, and replay registers
only the agents its histories ran: replaying many histories (or building many workers)
stops paying a sandbox build per agent per batch. Runs keep every restriction. The SDK's
payload passes around each activation get the answers the SDK's sandboxed calls give,
the sandbox entered once per question between two activations."""

from __future__ import annotations

from pathlib import Path

import pytest
from replaykit import replay
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, _importer, _runner

from tower.temporal import TowerPlugin
from tower.temporal import _sandbox as tower_sandbox
from tower.temporal.replay import load
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


async def test_payload_contexts_are_the_sdk_s_answers_the_sandbox_gives_once_per_activation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    entries, activations, asked = [0], [0], []
    store_entries: list[object] = []  # store questions that entered the sandbox
    applied, activate = _importer.Importer.applied, _runner._Instance.activate

    def counting_applied(self: _importer.Importer) -> object:
        entries[0] += 1
        return applied(self)

    def counting_activate(self: _runner._Instance, act: object) -> object:
        activations[0] += 1
        return activate(self, act)  # type: ignore[arg-type]

    def compared(name: str) -> object:
        kept = getattr(tower_sandbox._Answers, name)

        def both(self: tower_sandbox._Answers, command_info: object) -> object:
            before = entries[0]
            answer = kept(self, command_info)
            if entries[0] > before and name == "get_external_store_context":
                store_entries.append(command_info)
            before = entries[0]
            # The SDK's own answer now, from inside the sandbox: the same.
            assert getattr(self._run, name)(command_info) == answer
            entries[0] = before  # the comparison's own entry is not the run's
            asked.append((name, answer))
            return answer
        return both

    # A chat: updates, and local model calls whose payloads take the activity's context.
    histories = load(sorted(HISTORIES.glob("chat-1@*.json"))[:1])
    await replay(histories)  # the agent's one-off check (a sandbox of its own) done
    monkeypatch.setattr(_importer.Importer, "applied", counting_applied)
    monkeypatch.setattr(_runner._Instance, "activate", counting_activate)
    for name in ("get_serialization_context", "get_external_store_context"):
        monkeypatch.setattr(tower_sandbox._Answers, name, compared(name))
    results = await replay(histories)
    assert [r.ok for r in results] == [True]
    kinds = {type(answer).__name__ for _, answer in asked}
    assert {"WorkflowSerializationContext", "ActivitySerializationContext",
            "StorageDriverStoreContext"} <= kinds, kinds
    assert activations[0] > 10
    # Created (two entries), activated, and asked each question once between activations
    # (the run's own context once): the SDK asks about seven a time, and its sandbox
    # answered each by entering it.
    for_answers = entries[0] - activations[0] - 2
    assert len(asked) >= 4 * activations[0], (len(asked), activations[0])
    assert for_answers <= len(asked) / 4, (for_answers, len(asked))
    # Where an activity's payloads are stored is the run's own answer: asked once a run,
    # not once per model call.
    assert len(store_entries) == 1, store_entries

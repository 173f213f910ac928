"""An agent is its graph, its input and its start, and a Temporal user may still extend it
the Temporal way: a plain ``@workflow.defn`` subclass with a ``run`` of its own defines,
runs, and fails replay when it changes what a recorded run did."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

from subclass_agents import SlowAccount
from temporalio.client import Client
from towercli import TOWER

from worker import build_worker
from workflows.account import AccountRequest

ROOT = Path(__file__).resolve().parents[1]
SLOW = '''
from temporalio import workflow

from workflows.account import AccountAgent, AccountRequest, AccountState


@workflow.defn(name="account")
class SlowAccountAgent(AccountAgent):
    """The account agent, with a timer before its first step."""

    @workflow.run
    async def run(self, request: AccountRequest) -> AccountState:
        await workflow.sleep(0.1)
        return await super().run(request)
'''


def test_agent_files_carry_no_temporal_plumbing() -> None:
    plumbing = ("@workflow.run", "imports_passed_through", "@workflow.init")
    for path in sorted((ROOT / "workflows").glob("*.py")):
        text = path.read_text()
        assert not [p for p in plumbing if p in text], path.name
        if "from temporalio" in text:  # only an agent using Temporal beyond the graph
            assert path.name == "chat.py" and "Beyond the graph" in text, path.name


async def test_a_temporal_subclass_runs(client: Client, task_queue: str, db_path: Path) -> None:
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            workflows=[SlowAccount]):
        state = await client.execute_workflow(
            SlowAccount.run, AccountRequest(question="Check my account ACC-1001"),
            id=f"slow-{uuid.uuid4().hex[:8]}", task_queue=task_queue)
    assert state.node == "DONE" and "ACC-1001" in state.answer


def test_tower_replay_reports_the_subclass_as_nondeterministic(tmp_path: Path) -> None:
    project = tmp_path / "project"
    for part in ("workflows", "activities"):
        shutil.copytree(ROOT / part, project / part,
                        ignore=shutil.ignore_patterns("__pycache__"))
    history = ROOT / "tests" / "histories" / "account-1.json"
    same = subprocess.run([TOWER, "replay", str(history)], cwd=project, capture_output=True,
                          text=True, timeout=300)
    assert same.returncode == 0, same.stdout + same.stderr  # the agent as it was recorded
    (project / "workflows" / "slow_account.py").write_text(SLOW)
    registry = project / "workflows" / "registry.py"  # the example lists its agents
    registry.write_text(registry.read_text().replace(
        "from workflows.account import AccountAgent",
        "from workflows.slow_account import SlowAccountAgent as AccountAgent"))
    _replays_as_changed(project, history)
    registry.unlink()  # a project without a registry: every agent in workflows/ is found
    _replays_as_changed(project, history)


def _replays_as_changed(project: Path, history: Path) -> None:
    changed = subprocess.run([TOWER, "replay", str(history)], cwd=project,
                             capture_output=True, text=True, timeout=300)
    out = changed.stdout + changed.stderr
    assert changed.returncode != 0, out
    # The user's change, named by its step, node and command; no SDK or Tower internals.
    assert ("replay of run account-1 diverged before its first step: the code now starts a "
            "timer where the history has the move to node reason (step 1), event 5") in out, out
    assert "Traceback" not in out and "TMPRL" not in out, out

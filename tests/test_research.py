"""research end to end: the same eager scripted model under the three control models.

The model signals "done" as early as it can (after one source, after a short first
draft). Who decides is the only difference between the runs, and it shows in the moves.
"""

from __future__ import annotations

import uuid

import pytest
from conftest import WorkerFactory
from temporalio.client import Client
from workerkit import final_state

from tower.core.engine import Transition
from workflows.research import (
    MIN_WORDS,
    Control,
    ResearchAgent,
    ResearchRequest,
    ResearchState,
    may_leave,
    word_count,
)

TOPIC = "durable execution for LLM agents"


async def _run(client: Client, task_queue: str, request: ResearchRequest):
    handle = await client.start_workflow(
        ResearchAgent.run, request, id=f"research-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue)
    state = await final_state(handle, ResearchState)
    log = await handle.query("transitions", result_type=list[Transition])
    return state, [t.target for t in log]


async def test_three_control_models_behave_differently(
    client: Client, task_queue: str, scripted_worker: WorkerFactory
) -> None:
    async with scripted_worker():
        model, model_path = await _run(client, task_queue, ResearchRequest(
            topic=TOPIC, control=Control.MODEL))
        dev, dev_path = await _run(client, task_queue, ResearchRequest(
            topic=TOPIC, control=Control.DEVELOPER))
        hybrid, hybrid_path = await _run(client, task_queue, ResearchRequest(topic=TOPIC))

    # Model-controlled: the first signal ends each step, one source and a short draft.
    assert model.status == "DONE"
    assert model_path == ["research", "research", "draft", "draft", "DONE"]
    assert len(model.sources) == 1 and word_count(model.draft) < MIN_WORDS
    assert model.research_summary and model.draft_summary and model.held == []

    # Developer-controlled: code leaves as soon as its check holds; no signal needed.
    assert dev.status == "DONE"
    assert dev_path == ["research", "research", "draft", "draft", "DONE"]
    assert len(dev.sources) == 2 and word_count(dev.draft) >= MIN_WORDS
    assert dev.research_summary == "" and dev.draft_summary == ""  # never signalled
    assert dev.held == ["Not yet: 1 of 2 sources.", f"Not yet: 51 of {MIN_WORDS} words."]

    # Hybrid (the default): a signal the check refuses keeps the run in the state.
    assert hybrid.control == Control.HYBRID and hybrid.status == "DONE"
    assert hybrid_path == ["research"] * 4 + ["draft"] * 4 + ["DONE"]
    assert len(hybrid.sources) == 2 and word_count(hybrid.draft) >= MIN_WORDS
    assert hybrid.held == ["Not yet: 1 of 2 sources.", f"Not yet: 51 of {MIN_WORDS} words."]
    assert "2 source(s)" in hybrid.research_summary


async def test_a_step_that_never_completes_ends_on_the_budget(
    client: Client, task_queue: str, scripted_worker: WorkerFactory
) -> None:
    async with scripted_worker():
        state, path = await _run(client, task_queue, ResearchRequest(
            topic="medieval basket weaving", control=Control.HYBRID))
    assert state.status == "FAILED" and state.sources == []
    assert path == ["research"] * 5 + ["give_up", "FAILED"]
    assert any("loop budget exceeded" in e for e in state.errors)


@pytest.mark.parametrize(("control", "signalled", "check_ok", "leaves"), [
    (Control.MODEL, True, False, True), (Control.MODEL, False, True, False),
    (Control.DEVELOPER, True, False, False), (Control.DEVELOPER, False, True, True),
    (Control.HYBRID, True, False, False), (Control.HYBRID, False, True, False),
    (Control.HYBRID, True, True, True),
])
def test_who_decides(control: Control, signalled: bool, check_ok: bool, leaves: bool) -> None:
    assert may_leave(control, signalled, check_ok) is leaves


def test_bad_control_is_refused() -> None:
    with pytest.raises(ValueError, match="control"):
        ResearchRequest(topic=TOPIC, control="vibes")  # type: ignore[arg-type]

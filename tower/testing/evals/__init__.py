"""Evals from recorded runs: what a prompt, model or graph change does to real traffic.

``report = await run_eval(*paths, build_worker=candidate_worker(agents, bindings))``, then
``assert_verdicts(report, Change.SAME)``. Recorded runs are re-run against the candidate in
an isolated world (``runner``), their model calls answered from the recordings or live
(``models``), and each is compared with its baseline by scorers (``compare``).
docs/evals.md is the guide.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Worker

from tower.activities.model import ModelSettings
from tower.activities.own import WorkerSettings
from tower.temporal.replay import load
from tower.temporal.worker import build_worker as tower_worker
from tower.testing.evals.compare import BUILT_IN, RANK, Change, RunResult, Score, Scorer
from tower.testing.evals.models import Mode
from tower.testing.evals.recording import RunSummary, chains
from tower.testing.evals.runner import WorkerFactory, digests, isolated

__all__ = ["BUILT_IN", "EvalReport", "Mode", "RunResult", "Score", "Scorer", "Change",
           "assert_verdicts", "candidate_worker", "evaluate", "run_eval"]


class EvalReport(BaseModel):
    mode: Mode
    baseline: str  # "recorded" or the report folder compared with
    runs: list[RunResult] = Field(default_factory=list)
    data: str = "fresh"  # what each run's tools' data started as: fresh, or the copied file
    data_checked: list[str] = Field(default_factory=list)  # real files hashed before, after
    data_untouched: bool = True

    @property
    def counts(self) -> dict[str, int]:
        found = Counter(r.verdict.value for r in self.runs)
        return {v.value: found.get(v.value, 0) for v in Change}

    @property
    def worst(self) -> Change:
        return max((r.verdict for r in self.runs), key=RANK.__getitem__, default=Change.SAME)

    def totals(self) -> dict[str, dict[str, float]]:
        """Tokens, cost and latency summed over the runs, baseline and candidate."""
        out: dict[str, dict[str, float]] = {}
        for side in ("baseline", "candidate"):
            runs = [getattr(r, side) for r in self.runs]
            out[side] = {"tokens": sum(s.tokens for s in runs),
                         "cost_usd": round(sum(s.cost_usd for s in runs), 6),
                         "latency_s": round(sum(s.latency_s for s in runs), 3),
                         "model_calls": sum(s.model_calls for s in runs),
                         "tool_calls": sum(len(s.tool_calls) for s in runs)}
        return out

    def moved(self) -> dict[str, dict[tuple[str, str], int]]:
        """Per agent, each move whose traffic changed: candidate count minus baseline count."""
        out: dict[str, Counter[tuple[str, str]]] = {}
        for r in self.runs:
            delta = out.setdefault(r.agent, Counter())
            delta.update(r.candidate.moves)
            delta.subtract(r.baseline.moves)
        return {agent: {m: n for m, n in d.items() if n} for agent, d in out.items()
                if any(d.values())}


Progress = Callable[[int, int, RunResult], None]


def candidate_worker(agents: Sequence[type],
                     bindings: Callable[[str], Mapping[str, Any]] | None = None) -> WorkerFactory:
    """The eval's worker for ``agents``: their tools bound by ``bindings(db_path)`` (what the
    project's worker.py binds them with) to the eval's own data; None: nothing to bind."""

    def build(client: Client, *, db_path: Path, trust_dir: Path,
              models: ModelSettings | None = None, **options: Any) -> Worker:
        settings = WorkerSettings(models=models, trust_dir=trust_dir, data_dir=db_path.parent)
        return tower_worker(client, agents=agents, settings=settings,
                            bind=bindings(str(db_path)) if bindings else {}, **options)

    return build


async def evaluate(
    histories: Sequence[tuple[str, WorkflowHistory]], build_worker: WorkerFactory, *,
    mode: Mode = Mode.RECORDED, data: Path | None = None, watch: Path | None = None,
    baseline: Mapping[str, RunSummary] | None = None, baseline_name: str = "recorded",
    scorers: Sequence[Scorer] = BUILT_IN, timeout: float = 120.0,
    progress: Progress | None = None, **worker_options: Any,
) -> EvalReport:
    """Re-run each recorded run on ``build_worker``'s worker and compare.

    ``data``: the tools' database each run starts from a copy of (None: fresh data, seeded by
    the candidate's worker); ``watch``: a real database the eval must leave as it was (default
    ``data``); ``baseline``: summaries by workflow id from an earlier report (default: each
    recording's own); ``worker_options`` go to ``build_worker``."""
    recordings = chains(histories)
    report = EvalReport(mode=mode, baseline=baseline_name, data=str(data or "fresh"))
    before = digests(data, watch)  # the real files, hashed before and after
    async with isolated(recordings, build_worker, mode=mode, data=data, timeout=timeout,
                        **worker_options) as world:
        for i, recording in enumerate(recordings, 1):
            base = (baseline or {}).get(recording.workflow_id) or recording.summary
            report.runs.append(await world.run(recording, base, scorers))
            if progress is not None:
                progress(i, len(recordings), report.runs[-1])
    after = digests(data, watch)
    report.data_checked = list(before)
    report.data_untouched = all(after.get(f) == digest for f, digest in before.items())
    return report


async def run_eval(
    *paths: str | Path, build_worker: WorkerFactory, mode: Mode = Mode.RECORDED,
    data: Path | None = None, watch: Path | None = None,
    baseline: Mapping[str, RunSummary] | None = None,
    scorers: Sequence[Scorer] = BUILT_IN, timeout: float = 120.0, **worker_options: Any,
) -> EvalReport:
    """``evaluate`` the recorded runs in ``paths`` (history files or folders)."""
    return await evaluate(load(paths), build_worker, mode=mode, data=data, watch=watch,
                          baseline=baseline, scorers=scorers, timeout=timeout,
                          **worker_options)


def assert_verdicts(report: EvalReport, expected: Change | Mapping[str, Change]) -> None:
    """Every run's verdict is ``expected`` (one for all, or by workflow id); the
    AssertionError names each run that is not, with why."""
    wrong = []
    for r in report.runs:
        want = expected if isinstance(expected, Change) else expected.get(r.workflow_id)
        if want is not None and r.verdict is not want:
            why = "; ".join(f"{s.scorer}: {s.detail}" for s in r.scores)
            wrong.append(f"{r.workflow_id}: {r.verdict.value}, expected {want.value} ({why})")
    assert not wrong, "eval verdicts:\n" + "\n".join(wrong)

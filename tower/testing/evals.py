"""Evals in a test suite: ``report = await run_eval(*paths, build_worker=...)``, then
``assert_verdicts(report, Verdict.SAME)`` or per run. The same machinery as ``tower eval``
(``tower.evals``); docs/evals.md."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tower.evals import BUILT_IN, EvalReport, Mode, Scorer, Verdict, evaluate
from tower.evals.runner import WorkerFactory
from tower.evals.summary import RunSummary
from tower.testing.replay import load

__all__ = ["assert_verdicts", "run_eval"]


async def run_eval(
    *paths: str | Path, build_worker: WorkerFactory, mode: Mode = Mode.RECORDED,
    data: Path | None = None, baseline: Mapping[str, RunSummary] | None = None,
    scorers: Sequence[Scorer] = BUILT_IN, timeout: float = 120.0, **worker_options: Any,
) -> EvalReport:
    """Re-run the recorded runs in ``paths`` (files or folders) on ``build_worker``'s
    worker (the candidate: a project's ``worker.build_worker``, or one with candidate
    agents) and compare each with its recording; ``worker_options`` go to it."""
    return await evaluate(load(paths), build_worker, mode=mode, data=data, baseline=baseline,
                          scorers=scorers, timeout=timeout, **worker_options)


def assert_verdicts(report: EvalReport, expected: Verdict | Mapping[str, Verdict]) -> None:
    """Every run's verdict is ``expected`` (one for all, or by workflow id); the
    AssertionError names each run that is not, with why."""
    wrong = []
    for r in report.runs:
        want = expected if isinstance(expected, Verdict) else expected.get(r.workflow_id)
        if want is not None and r.verdict is not want:
            why = "; ".join(f"{s.scorer}: {s.detail}" for s in r.scores)
            wrong.append(f"{r.workflow_id}: {r.verdict.value}, expected {want.value} ({why})")
    assert not wrong, "eval verdicts:\n" + "\n".join(wrong)

"""What an eval costs per recorded run: ``tower eval`` over this repo's recorded histories
(recorded models), against replaying the same histories, measured side by side."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tower.activities.model import ModelSettings
from tower.temporal.replay import load, replay
from tower.testing.evals import evaluate
from worker import build_worker
from workflows.registry import AGENTS

HISTORIES = Path(__file__).parents[1] / "tests" / "histories"


async def cost(folder: Path = HISTORIES) -> dict[str, Any]:
    loaded = load(sorted(folder.glob("*.json")))
    started = time.monotonic()
    replayed = await replay(loaded, workflows=list(AGENTS.values()))
    replay_s = time.monotonic() - started
    started = time.monotonic()
    report = await evaluate(loaded, build_worker, models=ModelSettings())
    total = time.monotonic() - started
    runs = [r.seconds for r in report.runs]
    return {"histories": len(loaded), "runs": len(runs), "counts": report.counts,
            "eval_s": round(total, 2), "per_run_s": round(sum(runs) / len(runs), 3),
            "setup_s": round(total - sum(runs), 2),  # its own server, trust, data, worker
            "replay_per_run_s": round(replay_s / len(replayed), 4)}

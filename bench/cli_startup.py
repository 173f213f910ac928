"""`python -m bench.cli_startup`: how long `tower` takes to start, as ratios in one run.

Each figure is the median wall time of fresh processes, against a bare `python -c pass`
measured alongside: `tower --help` (the lazy group: no command module, no Temporal),
`tower graph account` (one command with the agents loaded), and `import temporalio.client`
and `import openai` for scale. "cold" runs compile every module afresh (an empty
bytecode cache); "warm" ones reuse the cache, as an installed CLI does.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOWER = str(Path(sys.executable).parent / "tower")
CASES = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "tower --help": [TOWER, "--help"],
    "tower graph account": [TOWER, "graph", "account"],
    "import temporalio.client": [sys.executable, "-c", "import temporalio.client"],
    "import openai": [sys.executable, "-c", "import openai"],
}


def wall(cmd: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


def measure(runs: int) -> dict[str, dict[str, float]]:
    import os

    figures: dict[str, dict[str, float]] = {}
    for name, cmd in CASES.items():
        cold = []
        for _ in range(runs):
            with tempfile.TemporaryDirectory() as cache:  # nothing compiled yet
                cold.append(wall(cmd, {**os.environ, "PYTHONPYCACHEPREFIX": cache}))
        wall(cmd)  # fill the normal cache
        warm = [wall(cmd) for _ in range(runs)]
        figures[name] = {"cold_s": statistics.median(cold), "warm_s": statistics.median(warm)}
    base = figures["python -c pass"]
    for f in figures.values():
        f["cold_x_python"] = f["cold_s"] / base["cold_s"]
        f["warm_x_python"] = f["warm_s"] / base["warm_s"]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = measure(args.runs)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"{'':<26} {'cold s':>8} {'warm s':>8} {'cold ×py':>9} {'warm ×py':>9}")
    for name, f in figures.items():
        print(f"{name:<26} {f['cold_s']:>8.3f} {f['warm_s']:>8.3f} "
              f"{f['cold_x_python']:>9.1f} {f['warm_x_python']:>9.1f}")


if __name__ == "__main__":
    main()

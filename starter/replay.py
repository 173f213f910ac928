"""Replay exported histories against this project's current code, as CI does before a
deploy (`tower history export RUN -o tests/histories/` writes them).

    python starter/replay.py tests/histories/
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from tower.testing import assert_replays
from workflows.registry import AGENTS


async def main(folder: Path) -> None:
    # TowerPlugin gives the replayer the worker's own sandbox and converter: what it ran is
    # what is replayed.
    replayed = await assert_replays(folder, workflows=list(AGENTS.values()))
    print(f"{len(replayed)} histories replayed, every one deterministic")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    asyncio.run(main(Path(sys.argv[1])))

"""The README's first command: `tower demo` on a machine with no Temporal server running.
It starts the embedded dev server, a worker on the offline scripted model, runs every demo
agent and the two gated runs, prints what happened and stops the server it started."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

from test_cli import TOWER, cli_env

from tower.cli.demo import RUNS
from tower.cli.devprocess import free_port


async def test_tower_demo_from_nothing(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"  # nothing answers there: the demo starts a server
    proc = await asyncio.create_subprocess_exec(
        TOWER, "demo", env=cli_env(address), cwd=tmp_path, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 240)
    text = out.decode()
    assert proc.returncode == 0, text[-3000:] + err.decode()[-3000:]
    assert f"no server at {address}: starting the embedded dev server" in text
    assert "model: scripted" in text
    # Every demo input ran, plus the refund and the migration that stop at their gates.
    assert text.count("\n== ") == len(RUNS) + 2
    assert {agent for agent, _, _ in RUNS} <= {line.split()[1].rstrip(":")
                                              for line in text.splitlines()
                                              if line.startswith("== ")}
    assert text.count("status: FAILED") == 2  # the unknown account, the declined card
    assert text.count("status: AWAITING_APPROVAL") == 2
    assert "outcome: gate refund_review approved" in text
    assert "outcome: gate dba_review rejected" in text
    assert text.count("/namespaces/default/workflows/demo-") == len(RUNS) + 2  # UI links
    assert "The dev server this demo started is stopped now" in text
    # Its state stays where the README says, for `tower dev` to serve again.
    assert (tmp_path / ".tower" / "temporal.sqlite").exists()

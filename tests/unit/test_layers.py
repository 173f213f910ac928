"""The engine's layers: the pure core and the pure contract types import no Temporal, so
they load (and are unit-tested) without the SDK."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import tower

PURE = sorted(
    f"tower.core.{p.stem}" for p in Path(tower.__file__).parent.joinpath("core").glob("*.py")
) + ["tower", "tower.contract", "tower.contract.wire", "tower.contract.decisions"]


def test_the_pure_layers_import_no_temporal() -> None:
    # A fresh interpreter: this test process has long since imported temporalio.
    probe = (
        "import importlib, json, sys\n"
        f"for name in {PURE!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'temporalio')))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    assert json.loads(out) == [], f"the pure layers pulled in {out}"
    assert "tower.core.state" in PURE and len(PURE) > 10  # the glob found the core

"""The engine's layers: the pure core and the pure contract types import no Temporal, so
they load (and are unit-tested) without the SDK."""

from __future__ import annotations

import ast
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


ROOT = Path(tower.__file__).resolve().parents[1]
PROJECT = {"activities", "starter", "workflows", "worker", "bench", "tests"}
# What a project may import from Tower: the public API, the contract types, the worker
# builder, the test helpers, and what a client signs decisions and checks policies with.
PUBLIC = ("tower", "tower.contract", "tower.testing", "tower.temporal.worker",
          "tower.core.signing", "tower.core.policy")


def imports(path: Path) -> list[str]:
    """Every absolute module ``path`` imports, at any depth (lazy imports too)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append(node.module)
    return found


def files(*parts: str) -> list[Path]:
    out: list[Path] = []
    for part in parts:
        path = ROOT / part
        out += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    assert out, parts
    return out


def test_the_engine_never_imports_the_project() -> None:
    bad = [f"{p.relative_to(ROOT)} imports {m}" for p in files("tower") for m in imports(p)
           if m.split(".")[0] in PROJECT]
    assert bad == []


def test_agents_activities_cli_and_worker_use_only_the_public_api() -> None:
    bad = [f"{p.relative_to(ROOT)} imports {m}"
           for p in files("workflows", "activities", "starter", "worker.py")
           for m in imports(p) if m.split(".")[0] == "tower"
           and not any(m == pub or m.startswith(pub + ".") and pub != "tower" for pub in PUBLIC)]
    assert bad == []


def test_the_direction_check_sees_a_violation(tmp_path: Path) -> None:
    # The checks above must be able to fail: a file reaching into the engine is caught.
    bad = tmp_path / "x.py"
    bad.write_text("from tower.core.engine import advance\n"
                   "def f():\n    import activities.tools\n")
    assert imports(bad) == ["tower.core.engine", "activities.tools"]

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


ROOT = Path(tower.__file__).resolve().parents[1]
PROJECT = {"activities", "starter", "workflows", "worker", "bench", "tests"}
# What a project may import from Tower: the public API, the contract types, the Temporal
# plugin and worker builder, the test helpers, what a client signs decisions and checks
# policies with, and the data converter a project's codec and payload store plug into.
PUBLIC = ("tower", "tower.contract", "tower.testing", "tower.temporal", "tower.temporal.worker",
          "tower.core.signing", "tower.core.policy", "tower.temporal.unopenable",
          "tower.activities", "tower.client", "tower.temporal.telemetry",
          # The HMAC settings of runs started before signed decisions, until 1.0 drops them.
          "tower.core.legacy_trust")
EXACT = ("tower", "tower.temporal")  # the package's own names, not every module below it


# Parsed in a child process: CPython 3.11 keeps the AST converter's recursion depth per
# process, not per thread (gh-106905), so ast.parse here can fail while another thread of
# this test process compiles (a worker's sandbox left running by an earlier test).
_SCAN = """
import ast, json, sys
found = {}
for path in sys.argv[1:]:
    names = found.setdefault(path, [])
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
print(json.dumps(found))
"""


def imports_of(paths: list[Path]) -> dict[Path, list[str]]:
    """Every absolute module each file imports, at any depth (lazy imports too)."""
    out = subprocess.run([sys.executable, "-c", _SCAN, *map(str, paths)], capture_output=True,
                         text=True, check=True).stdout
    found = {Path(p): names for p, names in json.loads(out).items()}
    assert found.keys() == set(paths), "the scan missed files"
    return found


def imports(path: Path) -> list[str]:
    return imports_of([path])[path]


def files(*parts: str) -> list[Path]:
    out: list[Path] = []
    for part in parts:
        path = ROOT / part
        out += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    assert out, parts
    return out


def test_the_engine_never_imports_the_project() -> None:
    bad = [f"{p.relative_to(ROOT)} imports {m}"
           for p, found in imports_of(files("tower")).items() for m in found
           if m.split(".")[0] in PROJECT]
    assert bad == []


def test_agents_activities_cli_and_worker_use_only_the_public_api() -> None:
    bad = [f"{p.relative_to(ROOT)} imports {m}"
           for p, found in imports_of(files("workflows", "activities", "starter",
                                            "worker.py")).items()
           for m in found if m.split(".")[0] == "tower"
           and not any(m == pub or m.startswith(pub + ".") and pub not in EXACT
                       for pub in PUBLIC)]
    assert bad == []


def test_the_direction_check_sees_a_violation(tmp_path: Path) -> None:
    # The checks above must be able to fail: a file reaching into the engine is caught.
    bad = tmp_path / "x.py"
    bad.write_text("from tower.core.engine import advance\n"
                   "def f():\n    import activities.tools\n")
    assert imports(bad) == ["tower.core.engine", "activities.tools"]

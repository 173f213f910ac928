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
) + ["tower", "tower.contract", "tower.contract.wire", "tower.contract.decisions",
     "tower.contract.messages", "tower.contract.failures"]


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
          "tower.core.signing", "tower.core.policy",
          "tower.activities", "tower.client", "tower.temporal.telemetry",
          "tower.temporal.payloads", "tower.temporal.codec", "tower.effects")
# The packages' own names, not every module below them.
EXACT = ("tower", "tower.temporal", "tower.effects")


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


def private_temporal(found: dict[Path, list[str]]) -> list[str]:
    """Each import of a private module of the Temporal layer (``tower.temporal._x``)."""
    return [f"{p.relative_to(ROOT) if p.is_relative_to(ROOT) else p.name} imports {m}"
            for p, names in found.items() for m in names
            if m.startswith("tower.temporal._")]


def test_the_client_reaches_runs_through_the_contract() -> None:
    # Queries, updates and signals by the names tower.contract.names gives them: the
    # client imports no module of the runtime, not even for a type.
    assert private_temporal(imports_of(files("tower/client"))) == []


def test_a_client_with_the_plugin_loads_no_runtime() -> None:
    # TowerPlugin on a client brings its converter and interceptors; the workflow runtime
    # loads only when a worker is configured (tower/temporal/plugin.py).
    probe = ("import sys\nimport tower.client.connection\nfrom tower.temporal import TowerPlugin\n"
             "TowerPlugin()\nprint(' '.join(sorted(sys.modules)))\n")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            check=True).stdout.split()
    assert "tower.temporal.plugin" in loaded
    assert not [m for m in loaded if m.startswith(("tower.temporal._machine_run",
                                                  "tower.temporal._gate",
                                                  "tower.temporal._interceptors",
                                                  "tower.effects"))]


def test_the_client_check_sees_a_runtime_import(tmp_path: Path) -> None:
    bad = tmp_path / "x.py"
    bad.write_text("from typing import TYPE_CHECKING\n"
                   "if TYPE_CHECKING:\n    from tower.temporal._runtime import AgentWorkflow\n")
    assert private_temporal(imports_of([bad])) == ["x.py imports tower.temporal._runtime"]


def test_the_direction_check_sees_a_violation(tmp_path: Path) -> None:
    # The checks above must be able to fail: a file reaching into the engine is caught.
    bad = tmp_path / "x.py"
    bad.write_text("from tower.core.engine import advance\n"
                   "def f():\n    import activities.tools\n")
    assert imports(bad) == ["tower.core.engine", "activities.tools"]


# What runs when a module loads or a function is called: imports at any depth, relative ones
# resolved, except those under `if TYPE_CHECKING:` (read by the type checker only).
_RUNTIME_SCAN = """
import ast, json, sys
root, paths = sys.argv[1], sys.argv[2:]

def typing_only(node):
    test = getattr(node, "test", None) if isinstance(node, ast.If) else None
    return "TYPE_CHECKING" in (getattr(test, "id", None), getattr(test, "attr", None))

def walk(node):
    for child in ast.iter_child_nodes(node):
        if typing_only(child):
            for other in child.orelse:
                yield other
                yield from walk(other)
            continue
        yield child
        yield from walk(child)

found = {}
for path in paths:
    parts = path[len(root) + 1:-3].split("/")
    package = parts[:-1]  # what a relative import is relative to
    names = found.setdefault(path, [])
    for node in walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            names += [module] if node.module else [f"{module}.{a.name}" for a in node.names]
print(json.dumps(found))
"""


def package_graph(root: Path) -> dict[tuple[str, str], str]:
    """Edges between the packages under ``root/tower`` (``tower.core``, ``tower.cli``; a
    module directly in ``tower/`` is ``tower``), each with one import that makes it."""
    paths = sorted((root / "tower").rglob("*.py"))
    out = subprocess.run([sys.executable, "-c", _RUNTIME_SCAN, str(root), *map(str, paths)],
                         capture_output=True, text=True, check=True).stdout

    def package(module: str) -> str:
        parts = module.split(".")
        return ".".join(parts[:2]) if len(parts) > 2 or (root / "tower" / parts[-1]).is_dir() \
            else "tower"

    edges: dict[tuple[str, str], str] = {}
    for path, names in json.loads(out).items():
        here = package(".".join(Path(path).relative_to(root).with_suffix("").parts))
        for name in names:
            if name.split(".")[0] == "tower" and (there := package(name)) != here:
                edges.setdefault((here, there), f"{Path(path).relative_to(root)} imports {name}")
    return edges


def a_cycle(edges: dict[tuple[str, str], str]) -> list[str]:
    """The edges of one cycle in the graph (each with the import that makes it), or []."""
    after: dict[str, list[str]] = {}
    for a, b in sorted(edges):
        after.setdefault(a, []).append(b)
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str]:
        if node in path:
            loop = [*path[path.index(node):], node]
            return [f"{a} -> {b} ({edges[a, b]})" for a, b in zip(loop, loop[1:], strict=False)]
        if node in done:
            return []
        for nxt in after.get(node, []):
            if found := visit(nxt, [*path, node]):
                return found
        done.add(node)
        return []

    for start in sorted(after):
        if found := visit(start, []):
            return found
    return []


def test_no_import_cycle_between_packages() -> None:
    # The contract at the bottom, then the core, the activities, the Temporal layer, the
    # test helpers, the client and the CLI: each imports only those below it.
    edges = package_graph(ROOT)
    assert ("tower.cli", "tower.client") in edges  # the scan sees the packages' imports
    assert a_cycle(edges) == []


def test_the_cycle_check_sees_a_cycle(tmp_path: Path) -> None:
    # It must be able to fail: a lazy import inside a function closes a cycle; one under
    # TYPE_CHECKING (the type checker's only) does not.
    for package in ("a", "b", "c"):
        (tmp_path / "tower" / package).mkdir(parents=True)
    (tmp_path / "tower" / "a" / "x.py").write_text("from tower.b.y import f\n")
    (tmp_path / "tower" / "b" / "y.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from tower.c import z\n"
        "def f():\n    from ..a import x\n")
    (tmp_path / "tower" / "c" / "z.py").write_text("import tower.b.y\n")
    edges = package_graph(tmp_path)
    assert set(edges) == {("tower.a", "tower.b"), ("tower.b", "tower.a"),
                          ("tower.c", "tower.b")}
    assert a_cycle(edges) == ["tower.a -> tower.b (tower/a/x.py imports tower.b.y)",
                              "tower.b -> tower.a (tower/b/y.py imports tower.a)"]

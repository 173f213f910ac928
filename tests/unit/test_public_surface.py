"""One public surface: what a project writes — the example application, the ``tower new``
templates, every Python block in docs/ — imports Tower only from ``tower``,
``tower.client``, ``tower.testing``, ``tower.temporal`` (and ``tower.effects``); each of
those modules says what it exports (``__all__``, every name there loads). And Tower uses
the Temporal SDK's public API only, so the pin admits its next minor."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = ("tower", "tower.client", "tower.testing", "tower.temporal", "tower.effects")


def _project_sources() -> dict[str, str]:
    """Every Python text a project writes, by where it comes from."""
    found: dict[str, str] = {}
    for pattern in ("workflows/**/*.py", "activities/**/*.py", "starter/*.py", "worker.py"):
        found.update({str(p.relative_to(ROOT)): p.read_text() for p in ROOT.glob(pattern)})
    for p in (ROOT / "tower" / "cli" / "new_project").rglob("*.py.tmpl"):
        text = p.read_text().replace("{{name}}", "name").replace("{{Name}}", "Name")
        found[str(p.relative_to(ROOT))] = text
    for p in [*ROOT.glob("docs/**/*.md"), ROOT / "README.md"]:
        for n, block in enumerate(re.findall(r"```python\n(.*?)```", p.read_text(), re.S)):
            found[f"{p.relative_to(ROOT)} (python block {n + 1})"] = block
    return found


def _tower_imports(text: str) -> list[str]:
    try:
        tree = ast.parse(text)
    except SyntaxError:  # a docs fragment that is not a whole program: its import lines
        tree = ast.parse("\n".join(line.strip() for line in text.splitlines()
                                   if re.match(r"\s*(from|import)\s+tower", line)))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
    return [n for n in names if n == "tower" or n.startswith("tower.")]


def test_projects_import_only_the_public_surface() -> None:
    sources = _project_sources()
    assert len(sources) > 40  # the scan found the example, the templates and the docs
    deep = {f"{where}: {name}" for where, text in sources.items()
            for name in _tower_imports(text) if name not in PUBLIC}
    assert deep == set()


def test_the_scan_sees_a_deep_import() -> None:
    assert _tower_imports("from tower.contract.wire import Authority\nimport tower.core") == [
        "tower.contract.wire", "tower.core"]
    assert _tower_imports("x = (\n    from tower.core import y") == ["tower.core"]


@pytest.mark.parametrize("module", [m for m in PUBLIC
                                    if importlib.util.find_spec(m) is not None])
def test_every_public_module_says_what_it_exports(module: str) -> None:
    loaded = importlib.import_module(module)
    exported = getattr(loaded, "__all__", None)
    assert exported, f"{module} has no __all__"
    missing = [name for name in exported if not hasattr(loaded, name)]
    assert missing == []


def _imported_names(text: str) -> set[tuple[str, str]]:
    """``(module, name)`` for each ``from tower... import name`` in ``text``."""
    try:
        tree = ast.parse(text)
    except SyntaxError:  # a docs fragment: its import lines
        tree = ast.parse("\n".join(line.strip() for line in text.splitlines()
                                   if re.match(r"\s*from\s+tower\S*\s+import\s+[^(]*$", line)))
    return {(node.module, alias.name) for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
            for alias in node.names}


def _unused(module: str, used: set[tuple[str, str]]) -> list[str]:
    loaded = importlib.import_module(module)
    return [name for name in loaded.__all__ if (module, name) not in used
            # An exception is public for the code that catches it.
            and not (isinstance(getattr(loaded, name), type)
                     and issubclass(getattr(loaded, name), BaseException))]


@pytest.mark.parametrize("module", PUBLIC)
def test_every_public_name_is_used_by_a_project(module: str) -> None:
    # A name only the CLI, the inbox or Tower's own tests use is not public: it stays in
    # the module that defines it (tower.client._runs, tower.testing._inprocess, ...).
    used = set().union(*map(_imported_names, _project_sources().values()))
    assert _unused(module, used) == []


def test_the_usage_check_sees_an_unused_name() -> None:
    used = _imported_names("from tower.client import connect, start_run as s\n")
    assert ("tower.client", "start_run") in used
    assert "follow" in _unused("tower.client", used)
    assert "DecisionRefused" not in _unused("tower.client", used)  # an exception


def test_a_caller_catches_one_root_and_reads_its_code() -> None:
    # Every exception a public module names is a TowerError, the root tower.client names
    # with its Code: a class of its own is public only where a caller catches it by itself.
    from tower.client import Code, TowerError
    from tower.contract.failures import TowerError as Root

    assert TowerError is Root and isinstance(TowerError("x").code, Code)
    named = [getattr(loaded, name) for loaded in map(importlib.import_module, PUBLIC)
             for name in loaded.__all__]
    errors = [e for e in named if isinstance(e, type) and issubclass(e, BaseException)]
    assert errors and all(issubclass(e, TowerError) for e in errors)


# A private module or class of the SDK, or an attribute its decorators attach
# (``__temporal_workflow_definition``): Tower names workflows and activities by the SDK's
# public rules instead (tower/temporal/plugin.py: workflow_name, activity_name).
PRIVATE_SDK = re.compile(r"temporalio\.[a-z_.]*\._|from temporalio[a-z_.]* import _"
                         r"|\._Definition\b|_runner\._Instance|__temporal_")


def test_tower_uses_the_sdk_s_public_api_only() -> None:
    sources = [*(ROOT / "tower").rglob("*.py"), *(ROOT / "workflows").rglob("*.py"),
               *(ROOT / "activities").rglob("*.py"), ROOT / "worker.py"]
    used = [f"{p.relative_to(ROOT)}:{n + 1}: {line.strip()}" for p in sources
            for n, line in enumerate(p.read_text().splitlines()) if PRIVATE_SDK.search(line)]
    assert used == []
    assert PRIVATE_SDK.search('getattr(fn, "__temporal_activity_definition", None)')
    pin = re.search(r'"temporalio([^"]*)"', (ROOT / "pyproject.toml").read_text())
    assert pin is not None and pin.group(1) == ">=1.35,<2"

"""What installing Tower puts in site-packages: the ``tower`` package and nothing else at
top level, so a project's own ``workflows/``, ``activities/``, ``worker.py`` and ``starter/``
are never shadowed, with the files the CLI reads at run time (the inbox's pages, ``tower
new``'s templates). Built as pip builds it, from a copy of what the build reads, with the
build backend the dev install put in the venv (pyproject.toml's dev extra): an isolated build
environment would fetch it from the index on every run."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.long

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_holds_the_tower_package_alone(tmp_path: Path) -> None:
    source = tmp_path / "source"
    shutil.copytree(ROOT / "tower", source / "tower",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(tmp_path / "dist"), str(source)],
                   check=True, timeout=600)
    [wheel] = (tmp_path / "dist").glob("tower-*.whl")
    names = zipfile.ZipFile(wheel).namelist()

    top = {name.split("/")[0] for name in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"tower"}, top
    assert "tower/cli/new_project/pyproject.toml.tmpl" in names
    assert any(name.startswith("tower/cli/inbox/templates/") for name in names)
    assert any(name.startswith("tower/cli/inbox/static/") for name in names)
    # Every module of the package is in it (a subpackage without __init__ would be lost).
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "tower").rglob("*.py")}
    assert modules <= set(names)

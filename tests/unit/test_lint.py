"""The code stays clean: ruff lints and mypy type-checks the whole project."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tool(name: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the venv's ``name`` from the project root, so pyproject.toml's config applies."""
    return subprocess.run([str(Path(sys.executable).parent / name), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_ruff_finds_nothing() -> None:
    result = _tool("ruff", "check", "--quiet", str(ROOT))
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_finds_nothing(mypy_result: tuple[int, str]) -> None:
    # The files to check are [tool.mypy] files in pyproject.toml; mypy started in the
    # background after collection (tests/unit/conftest.py).
    code, output = mypy_result
    assert code == 0, output

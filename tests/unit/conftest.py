"""mypy over the whole project takes half a minute of CPU from cold (a fresh clone has no
cache). When test_lint's mypy test is among the tests to run, mypy starts in the background
as soon as collection ends, so that time overlaps the end-to-end tests' waiting on the
server instead of adding to the suite's length; the test then reads its result."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO

import pytest

ROOT = Path(__file__).resolve().parents[2]
MYPY_TEST = "test_lint.py::test_mypy_finds_nothing"
_RUN = pytest.StashKey[tuple[subprocess.Popen[bytes], IO[bytes]]]()


def _start_mypy() -> tuple[subprocess.Popen[bytes], IO[bytes]]:
    """The venv's mypy from the project root (pyproject.toml's [tool.mypy] applies)."""
    out = tempfile.TemporaryFile()  # noqa: SIM115 -- read and closed by mypy_result
    proc = subprocess.Popen([str(Path(sys.executable).parent / "mypy")], cwd=ROOT,
                            stdout=out, stderr=subprocess.STDOUT)
    return proc, out


def pytest_collection_finish(session: pytest.Session) -> None:
    if any(item.nodeid.endswith(MYPY_TEST) for item in session.items):
        session.config.stash[_RUN] = _start_mypy()


def pytest_sessionfinish(session: pytest.Session) -> None:
    run = session.config.stash.get(_RUN, None)
    if run is not None and run[0].poll() is None:  # the session ended before the test ran
        run[0].kill()
        run[0].wait()


@pytest.fixture
def mypy_result(request: pytest.FixtureRequest) -> tuple[int, str]:
    """(exit code, output) of the mypy run started after collection (or started now)."""
    proc, out = request.config.stash.get(_RUN, None) or _start_mypy()
    code = proc.wait(timeout=240)
    with out:
        out.seek(0)
        return code, out.read().decode(errors="replace")

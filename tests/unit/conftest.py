"""mypy over the whole project takes about a minute of CPU from cold (a fresh clone has no
cache). When test_lint's mypy test is among the tests to run, mypy starts in the background
as soon as collection ends, so that time overlaps the end-to-end tests' waiting on the
server instead of adding to the suite's length; the test then reads its result.

Under pytest-xdist every test process collects every test: each would start its own mypy
(three cold runs at once, racing on one cache). One run is shared instead: the first process
to claim a folder in the run's base temporary directory starts mypy and writes its output and
exit code there; the process that runs the test reads them."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MYPY_TEST = "test_lint.py::test_mypy_finds_nothing"
MYPY_SECONDS = 240.0
_RUN = pytest.StashKey[tuple[subprocess.Popen[bytes], threading.Thread]]()
_FOLDER = pytest.StashKey[Path]()


def _shared(config: pytest.Config) -> Path | None:
    """The folder the processes of this xdist run share (in the run's own base temporary
    directory, which pytest's retention policy removes), or None when not under xdist."""
    basetemp = config.option.basetemp if hasattr(config, "workerinput") else None
    return Path(basetemp).parent / "mypy" if basetemp else None


def _start_mypy(folder: Path) -> tuple[subprocess.Popen[bytes], threading.Thread]:
    """The venv's mypy from the project root (pyproject.toml's [tool.mypy] applies); its
    output goes to ``folder``/out, and its exit code to ``folder``/code once it ends."""
    with (folder / "out").open("wb") as out:
        proc = subprocess.Popen([str(Path(sys.executable).parent / "mypy")], cwd=ROOT,
                                stdout=out, stderr=subprocess.STDOUT)

    def record() -> None:
        code = proc.wait()
        (folder / "code.part").write_text(str(code))
        (folder / "code.part").rename(folder / "code")  # whole, or not there yet

    recorder = threading.Thread(target=record, name="mypy", daemon=True)
    recorder.start()
    return proc, recorder


def _claim(config: pytest.Config) -> Path:
    """This run's folder; mypy is started here if no process of the run started it yet."""
    folder = config.stash.get(_FOLDER, None)
    if folder is None:
        folder = _shared(config) or Path(tempfile.mkdtemp(prefix="tower-")) / "mypy"
        config.stash[_FOLDER] = folder
    with contextlib.suppress(FileExistsError):  # (claimed by this or another process)
        folder.mkdir()
        config.stash[_RUN] = _start_mypy(folder)
    return folder


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    if any(item.nodeid.endswith(MYPY_TEST) for item in session.items):
        _claim(session.config)


def pytest_sessionfinish(session: pytest.Session) -> None:
    run = session.config.stash.get(_RUN, None)
    if run is None:
        return
    proc, recorder = run
    if proc.poll() is None and not session.shouldstop:
        # Another process of the run may be waiting for it: let it end (bounded).
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=MYPY_SECONDS)
    if proc.poll() is None:  # the session was interrupted, or mypy hung
        proc.kill()
    recorder.join(timeout=10)
    folder = session.config.stash[_FOLDER]
    if _shared(session.config) is None:  # this process's own folder: nobody else reads it
        shutil.rmtree(folder.parent, ignore_errors=True)


@pytest.fixture
def mypy_result(request: pytest.FixtureRequest) -> tuple[int, str]:
    """(exit code, output) of the mypy run started after collection (or started now)."""
    folder = _claim(request.config)
    deadline = time.monotonic() + MYPY_SECONDS
    while not (folder / "code").exists():
        assert time.monotonic() < deadline, f"mypy did not finish in {MYPY_SECONDS:.0f} s"
        time.sleep(0.2)
    return int((folder / "code").read_text()), (folder / "out").read_text(errors="replace")

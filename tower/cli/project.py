"""The project the CLI serves (found as Flask and Celery find an app): ``--project DIR``, else
the nearest folder at or above the current one with a ``workflows/`` package. Its folder goes
first on ``sys.path``: ``workflows``, ``activities`` and ``worker`` are the project's own."""

from __future__ import annotations

import importlib
import os
import sys
import tomllib
from pathlib import Path
from types import ModuleType

from tower.cli.errors import CliError

_chosen: Path | None = None


def use(path: str | Path | None) -> None:
    global _chosen
    folder = None if path is None else Path(path).expanduser().resolve()
    if folder is not None and not is_project(folder):
        raise CliError(f"--project {path}: no workflows/ package there (a Tower project "
                       "keeps its agents in workflows/; `tower new NAME` makes one)")
    _chosen = folder


def is_project(folder: Path) -> bool:
    return (folder / "workflows" / "__init__.py").is_file()


def find(start: Path | None = None) -> Path | None:
    """The chosen project, else the nearest folder at or above ``start`` (the cwd)."""
    if _chosen is not None:
        return _chosen
    here = (start or Path.cwd()).resolve()
    return next((d for d in (here, *here.parents) if is_project(d)), None)


def example() -> Path | None:
    """Tower's own example application, when Tower runs from its source checkout."""
    checkout = Path(__file__).resolve().parents[2]
    return checkout if is_project(checkout) and (checkout / "worker.py").is_file() else None


def root() -> Path:
    """The project's folder, first on ``sys.path``; a clear error outside any project."""
    folder = find()
    if folder is None:
        raise CliError(f"no Tower project here ({Path.cwd()}): no workflows/ package in this "
                       "folder or above. Run it in your project, pass --project DIR, or "
                       "start one with `tower new NAME`")
    entry = str(folder)
    if sys.path[:1] != [entry]:
        if entry in sys.path:
            sys.path.remove(entry)
        sys.path.insert(0, entry)
    return folder


def module(name: str) -> ModuleType:
    """One of the project's own modules (``worker``, ``workflows.refund``)."""
    root()
    return importlib.import_module(name)


def task_queue() -> str:
    """TOWER_TASK_QUEUE, else the project's ``[tool.tower] task-queue`` (`tower new` names it
    after the project: two projects on one server never share one), else ``tower``."""
    from tower.client.connection import TASK_QUEUE

    if os.environ.get("TOWER_TASK_QUEUE"):
        return os.environ["TOWER_TASK_QUEUE"]
    folder = find()
    try:  # (no pyproject.toml: an OSError)
        config = tomllib.loads((folder / "pyproject.toml").read_text()) if folder else {}
    except (OSError, tomllib.TOMLDecodeError):
        return TASK_QUEUE
    return str(config.get("tool", {}).get("tower", {}).get("task-queue") or TASK_QUEUE)

"""Optional extras: parts only some deployments use install apart (``tower[inbox]``,
``tower[mcp]``, ``tower[postgres]``); a feature whose extra is missing says so in one line."""

from __future__ import annotations

import importlib.util

from tower.contract.failures import Code, TowerError

__all__ = ["EXTRAS", "MissingExtra", "missing", "require"]

# extra -> the modules it installs (what pyproject.toml's optional-dependencies list)
EXTRAS = {
    "inbox": ("starlette", "jinja2", "itsdangerous", "multipart", "uvicorn"),
    "mcp": ("mcp", "jsonschema"),
    "postgres": ("psycopg",),
}


class MissingExtra(TowerError, ImportError):  # an ImportError: optional imports catch one
    """A feature needs an extra that is not installed."""

    CODE = Code.MISSING_EXTRA


def missing(extra: str) -> list[str]:
    """The modules of ``extra`` that are not installed."""
    return [m for m in EXTRAS[extra] if importlib.util.find_spec(m) is None]


def require(extra: str, feature: str) -> None:
    """Raise MissingExtra, in one line saying what to install, unless ``extra`` is there."""
    gone = missing(extra)
    if gone:
        raise MissingExtra(f"{feature} needs the '{extra}' extra ({', '.join(gone)} not "
                           f"installed): pip install 'tower[{extra}]'")

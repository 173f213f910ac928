"""A worker installs what a worker needs: the inbox's web stack and the MCP SDK are extras
(``tower[inbox]``, ``tower[mcp]``, ``tower[postgres]``), in ``dev`` too; a feature whose
extra is missing says which, in one line."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tower import extras

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())


def test_only_some_deployments_install_the_web_stack_and_mcp() -> None:
    project = PYPROJECT["project"]
    core = " ".join(project["dependencies"])
    for part in ("starlette", "jinja2", "itsdangerous", "multipart", "uvicorn", "mcp",
                 "jsonschema", "psycopg"):
        assert part not in core
    optional = project["optional-dependencies"]
    assert {"inbox", "mcp", "postgres"} <= set(optional)
    assert "tower[inbox,mcp,postgres]" in optional["dev"]
    for extra, modules in extras.EXTRAS.items():  # what require() checks is what installs
        listed = " ".join(optional[extra]).replace("python-multipart", "multipart")
        assert all(m in listed for m in modules), extra


def test_a_missing_extra_is_one_line_saying_what_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    extras.require("inbox", "tower inbox")  # installed here (the dev extra)
    monkeypatch.setitem(extras.EXTRAS, "inbox", ("starlette", "no_such_module_tower"))
    with pytest.raises(extras.MissingExtra) as missing:
        extras.require("inbox", "tower inbox")
    assert str(missing.value) == ("tower inbox needs the 'inbox' extra (no_such_module_tower "
                                  "not installed): pip install 'tower[inbox]'")

"""Web UI links printed from another folder than `tower dev`'s point at that server's UI
port, not at :8233."""

from __future__ import annotations

from pathlib import Path

import pytest

from tower.cli.ui import remember_dev_ui, ui_base


def test_a_link_from_another_folder_uses_the_dev_server_s_ui_port(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOWER_UI_URL", raising=False)
    monkeypatch.setenv("TOWER_CONFIG_DIR", str(tmp_path / "config"))
    (tmp_path / "project").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "project")
    remember_dev_ui("127.0.0.1:7999", "http://localhost:8999")  # what `tower dev` records
    monkeypatch.chdir(tmp_path / "elsewhere")  # another folder: no .tower/ here
    assert ui_base("127.0.0.1:7999") == "http://localhost:8999"
    assert ui_base("localhost:7999") == "http://localhost:8999"
    assert ui_base("127.0.0.1:7000") == "http://localhost:8233"  # a server it did not start

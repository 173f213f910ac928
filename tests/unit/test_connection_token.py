"""TOWER_TEMPORAL_TOKEN_FILE: every connection (CLI, worker, inbox) sends the file's JWT as a
bearer token, for the server's authorizer (docs/production.md, step 11)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tower.client.connection import connect_config


def test_the_token_file_becomes_the_authorization_header(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    token = tmp_path / "worker.jwt"
    token.write_text("eyJhbGciOiJFUzI1NiJ9.e30.sig\n")
    monkeypatch.setenv("TOWER_TEMPORAL_TOKEN_FILE", str(token))
    config = connect_config("127.0.0.1:7233")
    assert config["rpc_metadata"]["authorization"] == "Bearer eyJhbGciOiJFUzI1NiJ9.e30.sig"


def test_a_missing_token_file_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TOWER_TEMPORAL_TOKEN_FILE", str(tmp_path / "absent.jwt"))
    with pytest.raises(ValueError, match="TOWER_TEMPORAL_TOKEN_FILE=.*absent.jwt"):
        connect_config("127.0.0.1:7233")


def test_without_it_no_token_is_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOWER_TEMPORAL_TOKEN_FILE", raising=False)
    assert "authorization" not in connect_config("127.0.0.1:7233").get("rpc_metadata", {})

"""Where the CLI finds a tenant's approval secret, and what a gated run's input gets."""

from __future__ import annotations

from pathlib import Path

import pytest

from starter.approvals import parse_edits, secret_for, settings_for_run, with_approvals
from starter.common import CliError
from tower.core.approval import run_key
from workflows.account import AccountRequest
from workflows.refund import RefundRequest


def test_per_tenant_secret_wins_over_the_shared_one(tmp_path: Path) -> None:
    env = {"TOWER_APPROVAL_SECRET": "shared", "TOWER_APPROVAL_SECRET_ACME_PROD": "acme",
           "TOWER_APPROVAL_SECRET_FILE": str(tmp_path / "none")}
    assert secret_for("acme-prod", env) == (b"acme", "TOWER_APPROVAL_SECRET_ACME_PROD")
    assert secret_for("default", env) == (b"shared", "TOWER_APPROVAL_SECRET")


def test_secret_file_and_its_errors(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_text("from-a-file\n")
    assert secret_for("default", {"TOWER_APPROVAL_SECRET_FILE": str(path)}) == (
        b"from-a-file", str(path))
    path.write_text("\n")
    with pytest.raises(CliError, match="is empty"):
        secret_for("default", {"TOWER_APPROVAL_SECRET_FILE": str(path)})
    assert secret_for("default", {"TOWER_APPROVAL_SECRET_FILE": str(tmp_path / "x")}) is None


def test_a_run_gets_a_per_run_key_never_the_secret(tmp_path: Path) -> None:
    env = {"TOWER_APPROVAL_SECRET": "s3cret", "TOWER_APPROVAL_SECRET_FILE": str(tmp_path / "x")}
    settings = settings_for_run("default", "refund-1", env)
    assert settings.key == run_key(b"s3cret", "default", "refund-1")
    assert settings.key != run_key(b"s3cret", "default", "refund-2")
    assert settings.tenant == "default" and not settings.allow_unsigned
    assert "s3cret" not in settings.model_dump_json()
    request = with_approvals(RefundRequest(message="refund $1"), "default", "refund-1", env)
    assert request.approvals == settings  # type: ignore[attr-defined]
    plain = AccountRequest(question="hi")
    assert with_approvals(plain, "default", "account-1", env) is plain


def test_no_secret_means_no_gated_run_unless_unsigned_is_allowed(tmp_path: Path) -> None:
    none = {"TOWER_APPROVAL_SECRET_FILE": str(tmp_path / "x")}
    with pytest.raises(CliError, match="no approval secret for tenant 'default'"):
        settings_for_run("default", "r", none)
    unsigned = settings_for_run("default", "r", {**none, "TOWER_ALLOW_UNSIGNED": "1"})
    assert unsigned.key is None and unsigned.allow_unsigned


def test_set_values_are_json_when_they_parse() -> None:
    assert parse_edits(["amount_cents=50000", "note=hello", "ok=true"]) == {
        "amount_cents": 50000, "note": "hello", "ok": True}
    with pytest.raises(CliError, match="field=value"):
        parse_edits(["amount_cents"])

"""`tower stores`, as a user runs it from a folder of their own: where the settings put each
store, whether each answers (a real PostgreSQL, tests/pgserver.py), never a password and
never a traceback; a store that does not answer exits 1."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest
from pgserver import Postgres
from temporalio.testing import WorkflowEnvironment
from test_cli import TOWER, address_of


async def stores(cwd: Path, *args: str, **settings: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TOWER_", "TEMPORAL_"))}
    proc = await asyncio.create_subprocess_exec(
        TOWER, "stores", *args, cwd=cwd, env={**env, **settings},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_local_files_by_default_and_the_dev_server_is_not_shared(
    env: WorkflowEnvironment, tmp_path: Path,
) -> None:
    code, out, err = await stores(tmp_path, "--json", TEMPORAL_ADDRESS=address_of(env))
    assert code == 0, err
    said = json.loads(out)
    assert [(s["store"], s["where"]) for s in said["stores"]] == [
        ("message store", "local file .tower/messages.sqlite"),
        ("stream store", "local file .tower/streams.sqlite"),
        ("payload store", "local directory .tower/payloads")]
    assert all(s["serves"] and "not made yet" in s["found"] for s in said["stores"])
    assert said["shared_server"] is False and said["warning"] == ""
    assert not (tmp_path / ".tower").exists()  # looking made nothing


async def test_one_url_names_every_store_each_answers_and_no_password_shows(
    tmp_path: Path, pg_server: Postgres, pg_url: str,
) -> None:
    code, out, err = await stores(tmp_path, "--no-server", TOWER_STORE_URL=pg_url)
    assert code == 0, err
    lines = out.splitlines()[1:]
    assert len(lines) == 3 and all("PostgreSQL postgresql://temporal:***@" in line
                                   and line.rstrip().endswith("answers") for line in lines)
    assert pg_server.password not in out + err


@pytest.mark.parametrize("setting", ["TOWER_STORE_URL", "TOWER_MESSAGES"])
async def test_a_store_that_does_not_answer_is_one_line_and_exit_1(
    tmp_path: Path, setting: str,
) -> None:
    url = "postgresql://tower:hunter2@127.0.0.1:1/tower"  # nothing listens on port 1
    code, out, err = await stores(tmp_path, "--no-server", **{setting: url})
    assert code == 1, out + err
    message = next(line for line in out.splitlines() if line.startswith("message store"))
    assert "postgresql://tower:***@127.0.0.1:1/tower" in message and "unreachable" in message
    assert "hunter2" not in out + err and "Traceback" not in out + err


async def test_a_setting_that_is_no_store_is_a_clear_error(tmp_path: Path) -> None:
    code, out, err = await stores(tmp_path, "--no-server", TOWER_STORE_URL="mysql://x@db/t")
    assert code == 2 and "TOWER_STORE_URL must be a postgresql:// URL" in err, out + err
    assert "Traceback" not in err

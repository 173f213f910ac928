"""`tower keys worker`: the deployment's attestation key, made and enrolled in one command;
until one is enrolled, `tower pending` and the inbox say why nothing can be listed."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from towercli import tower_cli

from tower.activities.own import WorkerSettings, attestation_missing
from tower.activities.trust import read_trust
from tower.cli.approvals import unattested
from tower.cli.trust_files import enrol, ensure_policy
from tower.client._pending import Deployment


def _env(tmp_path: Path) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("TOWER_")},
            "TOWER_TRUST_DIR": str(tmp_path / "trust"),
            "TOWER_CONFIG_DIR": str(tmp_path / "approvers")}


def _listing(root: Path) -> Deployment:
    return Deployment(roster=read_trust(root, "default").roster, agents=frozenset({"refund"}),
                      queues=frozenset({"tower"}))


async def test_keys_worker_makes_and_enrols_the_attestation_key(tmp_path: Path) -> None:
    root = tmp_path / "trust"
    # Set up as docs/approvals.md says for approvers: their keys, no worker's.
    enrol(root, "default", "alice", roles=["manager"], config=tmp_path / "approvers")
    ensure_policy(root, "default")
    why = unattested(_listing(root), "default")
    assert why is not None and "enrols no attestation key" in why and "tower keys worker" in why
    assert attestation_missing(WorkerSettings(trust_dir=root), "default") is not None

    code, out, err = await tower_cli(["keys", "worker", "--json"], env=_env(tmp_path))
    assert code == 0, err
    made = json.loads(out)
    key = Path(made["key"])
    assert made["attests"] is True and key == root / "default" / "worker.jwk"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and "d" in json.loads(key.read_text())
    assert unattested(_listing(root), "default") is None  # now requests can be listed
    assert attestation_missing(WorkerSettings(trust_dir=root), "default") is None
    # Again: the same key, enrolled once; alice is still in the roster.
    code, out, err = await tower_cli(["keys", "worker", "--json"], env=_env(tmp_path))
    assert code == 0 and json.loads(out)["keys"] == made["keys"], err
    members = read_trust(root, "default").roster.members
    assert sorted(m.name for m in members) == ["alice", "worker"]

"""Write a tenant's roster and policy (a deployment's files), for `tower keys`, the demo and
tests. The worker only reads them (tower/activities/trust.py)."""

from __future__ import annotations

import json
from pathlib import Path

from tower.activities.private_files import write_private
from tower.activities.trust import WORKER_KEY_FILE, tenant_dir
from tower.cli.errors import CliError
from tower.client.keys import create_key, key_path, load_key, member, new_key, with_member
from tower.contract.trust import Policy, Roster
from tower.core.signing import public_of


def read_roster(root: Path, tenant: str) -> Roster:
    path = tenant_dir(root, tenant) / "roster.json"
    if not path.is_file():
        return Roster(tenant=tenant)
    return Roster.model_validate_json(path.read_bytes())


def write_roster(root: Path, roster: Roster) -> Path:
    return _write(tenant_dir(root, roster.tenant) / "roster.json",
                  roster.model_dump(mode="json", exclude_none=True))


def write_policy(root: Path, policy: Policy) -> Path:
    return _write(tenant_dir(root, policy.tenant) / "policy.json",
                  policy.model_dump(mode="json", exclude_defaults=False))


def _write(path: Path, data: object) -> Path:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        tmp.replace(path)  # a worker reading mid-write sees the old file or the new, never half
    except OSError as exc:
        raise _unwritable(path, exc) from None
    return path


def _unwritable(path: Path, exc: OSError) -> CliError:
    return CliError(f"cannot write {path} in the trust directory (TOWER_TRUST_DIR): "
                    f"{exc.filename}: {exc.strerror or exc}")


def enrol(root: Path, tenant: str, name: str, *, config: Path | None = None,
          roles: list[str] | None = None, vouches_for: list[str] | None = None,
          events: list[str] | None = None) -> Roster:
    """Put ``name``'s public key (made if missing) into the tenant's roster. A member
    already there keeps its keys; what is given (roles, vouches, events) replaces theirs."""
    if not key_path(name, config).exists():
        create_key(name, config)
    public = public_of(load_key(name, config))
    roster = read_roster(root, tenant)
    given = {k: sorted(set(v)) for k, v in
             (("roles", roles), ("vouches_for", vouches_for), ("events", events)) if v}
    known = any(k.kid == public.kid for m in roster.members for k in m.keys)
    if known and not given:
        return roster
    if not known:  # a member of that name gets the new key added (a rotation)
        roster = with_member(roster, member(name, public, roles=roles or [],
                                            vouches_for=vouches_for or [], events=events or []))
    members = [type(m).model_validate({**m.model_dump(), **given}) if m.name == name else m
               for m in roster.members]
    write_roster(root, roster.model_copy(update={"members": members}))
    return read_roster(root, tenant)


def ensure_policy(root: Path, tenant: str) -> Path:
    """The tenant's policy file, created with the defaults (signed decisions only) if absent."""
    path = tenant_dir(root, tenant) / "policy.json"
    return path if path.is_file() else write_policy(root, Policy(tenant=tenant))


DEV_APPROVERS = {"alice": ["manager"], "bob": ["manager"], "dana": ["dba"], "carol": ["clerk"]}


def dev_trust(root: Path, tenant: str, *, config: Path | None = None,
              approvers: dict[str, list[str]] | None = None, **policy: object) -> Roster:
    """A development tenant: each approver's key (made if missing, in ``config``) in the
    roster with its roles, and a policy (defaults, or ``policy``'s fields) — for the demo,
    the history recorders and tests. A real deployment writes its own files."""
    roster = read_roster(root, tenant)
    for name, roles in (DEV_APPROVERS if approvers is None else approvers).items():
        roster = enrol(root, tenant, name, config=config, roles=roles)
    roster = enrol_worker(root, tenant)
    if not (tenant_dir(root, tenant) / "roster.json").is_file():
        write_roster(root, roster)
    if policy or not (tenant_dir(root, tenant) / "policy.json").is_file():
        write_policy(root, Policy.model_validate({"tenant": tenant, **policy}))
    return roster


def enrol_worker(root: Path, tenant: str, name: str = "worker") -> Roster:
    """The deployment's worker key (``<tenant>/worker.jwk``, made if missing) in the
    tenant's roster as a member that ``attests`` pending requests and decides nothing."""
    path = tenant_dir(root, tenant) / WORKER_KEY_FILE
    if not path.is_file():
        try:
            write_private(path, json.dumps(new_key()), exclusive=True)
        except FileExistsError:
            pass  # another process made it just now: theirs is the one
        except OSError as exc:
            raise _unwritable(path, exc) from None
    public = public_of(json.loads(path.read_text()))
    roster = read_roster(root, tenant)
    if any(k.kid == public.kid for m in roster.members for k in m.keys):
        return roster
    roster = with_member(roster, member(name, public).model_copy(update={"attests": True}))
    write_roster(root, roster)
    return roster

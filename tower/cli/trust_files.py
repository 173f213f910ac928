"""`tower keys`: approvers' signing keys, and a tenant's roster and policy (a deployment's
files) written for it, the demo and tests. The worker only reads them
(tower/activities/trust.py)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from tower.activities.private_files import write_private
from tower.activities.trust import WORKER_KEY_FILE, tenant_dir
from tower.activities.trust import trust_dir as default_trust_dir
from tower.cli.errors import CliError
from tower.cli.output import json_option, print_json
from tower.client.keys import create_key, key_path, load_key, new_key, with_member
from tower.contract.trust import Member, Policy, Roster
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
        roster = with_member(roster, Member(name=name, keys=[public]))  # given: set below
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
    for name, roles in (DEV_APPROVERS if approvers is None else approvers).items():
        enrol(root, tenant, name, config=config, roles=roles)
    roster = enrol_worker(root, tenant)  # the roster file exists from here on
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
    roster = with_member(roster, Member(name=name, keys=[public], attests=True))
    write_roster(root, roster)
    return roster


@click.group("keys", help="Approvers' signing keys and the tenant's roster (docs/approvals.md).")
def keys() -> None:
    pass


@keys.command("new", help=(
    "Make an Ed25519 key pair for NAME. The private key is written to <config>/keys/NAME.jwk "
    "(mode 0600; config: TOWER_CONFIG_DIR or ~/.config/tower); the public JWK is printed for "
    "the tenant's roster."))
@click.argument("name", metavar="NAME")
@click.option("--kid", help="key id (default: NAME-<date>-<random>)")
@json_option("the public JWK and where the private key is, as JSON")
def new(name: str, kid: str | None, as_json: bool) -> int:
    jwk = create_key(name, kid=kid).model_dump(mode="json", exclude_none=True)
    if as_json:
        print_json({"public": jwk, "private_key": str(key_path(name))})
        return 0
    print(json.dumps(jwk))
    print(f"private key: {key_path(name)} (mode 0600; never share "
          "it). Add the public key above to the tenant's roster.json "
          f"(`tower keys enrol {name} --role ROLE` on the deployment).")
    return 0


@keys.command("enrol", help=(
    "Add the public half of NAME's key (made if missing) to <trust dir>/<tenant>/roster.json "
    "with the given roles, and create the tenant's default policy if it has none. Trust dir: "
    "TOWER_TRUST_DIR or .tower/trust."))
@click.argument("name", metavar="NAME")
@click.option("--for-tenant", default="default", show_default=True, metavar="TENANT")
@click.option("--role", "roles", multiple=True, help="a role NAME holds (repeatable)")
@click.option("--vouches-for", multiple=True, metavar="ROLE",
              help="(an issuer, e.g. a web inbox) a role it may vouch for")
@click.option("--events", multiple=True, metavar="AGENT",
              help="an agent whose events NAME may send")
@click.option("--trust-dir", "root", type=click.Path(path_type=Path), default=default_trust_dir)
@json_option("the roster member, as JSON")
def enrol_command(name: str, for_tenant: str, roles: tuple[str, ...],
                  vouches_for: tuple[str, ...], events: tuple[str, ...], root: Path,
                  as_json: bool) -> int:
    was = next((m for m in read_roster(root, for_tenant).members if m.name == name), None)
    roster = enrol(root, for_tenant, name, roles=list(roles), vouches_for=list(vouches_for),
                 events=list(events))
    ensure_policy(root, for_tenant)
    who = next(m for m in roster.members if m.name == name)
    if as_json:
        print_json({"tenant": for_tenant, **who.model_dump(mode="json", exclude_none=True)})
        return 0
    if was is not None and was.roles != who.roles:  # an existing member's roles changed
        print(f"{name}'s roles changed: {', '.join(was.roles) or '-'} -> "
              f"{', '.join(who.roles) or '-'} (a run re-reads its roster when a decision "
              "needs it)")
    print(f"{name} in tenant {for_tenant!r}'s roster: roles {', '.join(who.roles) or '-'}; "
          f"keys {', '.join(k.kid for k in who.keys)}")
    return 0


@keys.command("worker", help=(
    "Make the deployment's attestation key (<trust dir>/<tenant>/worker.jwk, mode 0600, kept "
    "if it exists) and enrol its public half in the tenant's roster as the member that "
    "vouches for its workers' pending requests: without it, `tower pending` and the inbox "
    "list none. Give the key to every worker (the same trust dir, or TOWER_WORKER_KEY)."))
@click.option("--for-tenant", default="default", show_default=True, metavar="TENANT")
@click.option("--name", default="worker", show_default=True, help="its name in the roster")
@click.option("--trust-dir", "root", type=click.Path(path_type=Path), default=default_trust_dir)
@json_option("the roster member and where the key is, as JSON")
def worker(for_tenant: str, name: str, root: Path, as_json: bool) -> int:
    roster = enrol_worker(root, for_tenant, name)
    ensure_policy(root, for_tenant)
    who = next(m for m in roster.members if m.attests)
    key = tenant_dir(root, for_tenant) / WORKER_KEY_FILE
    if as_json:
        print_json({"tenant": for_tenant, "key": str(key),
                    **who.model_dump(mode="json", exclude_none=True)})
        return 0
    print(f"{who.name} attests tenant {for_tenant!r}'s requests: key {key} (mode 0600; "
          f"kid {', '.join(k.kid for k in who.keys)}). Workers read it from this trust dir, "
          "or from the file TOWER_WORKER_KEY names.")
    return 0

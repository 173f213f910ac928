"""`tower keys new NAME` (an approver's key pair), `tower keys enrol NAME` (the deployment's
side: a public key into a tenant's roster) and `tower keys worker` (the deployment's
attestation key)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from tower.cli.output import json_option, print_json


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
    from tower.client.keys import create_key, key_path

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
@click.option("--trust-dir", type=click.Path(path_type=Path))
@json_option("the roster member, as JSON")
def enrol(name: str, for_tenant: str, roles: tuple[str, ...], vouches_for: tuple[str, ...],
          events: tuple[str, ...], trust_dir: Path | None, as_json: bool) -> int:
    from tower.activities.trust import trust_dir as default_trust_dir
    from tower.cli.trust_files import enrol as add
    from tower.cli.trust_files import ensure_policy, read_roster

    root = trust_dir or default_trust_dir()
    was = next((m for m in read_roster(root, for_tenant).members if m.name == name), None)
    roster = add(root, for_tenant, name, roles=list(roles), vouches_for=list(vouches_for),
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
@click.option("--trust-dir", type=click.Path(path_type=Path))
@json_option("the roster member and where the key is, as JSON")
def worker(for_tenant: str, name: str, trust_dir: Path | None, as_json: bool) -> int:
    from tower.activities.trust import WORKER_KEY_FILE, tenant_dir
    from tower.activities.trust import trust_dir as default_trust_dir
    from tower.cli.trust_files import enrol_worker, ensure_policy

    root = trust_dir or default_trust_dir()
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

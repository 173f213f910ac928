"""`tower inbox`: the approvers' web app for one tenant (docs/inbox.md)."""

from __future__ import annotations

import asyncio
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tower.cli.devserver import DATA_DIR
from tower.cli.errors import CliError
from tower.cli.output import json_option, print_json, tenant_option

if TYPE_CHECKING:
    from tower.cli.inbox.app import InboxConfig

DEV_ACCOUNTS = DATA_DIR / "inbox-accounts.json"
# Sessions (revoked at sign-out) and what approvers decided, beside the accounts.
STORE = DATA_DIR / "inbox.sqlite"


@click.command("inbox", help=(
    "Serve a web app where approvers sign in, see the runs waiting for a decision their "
    "roles may take, and approve or reject them (signed, role-checked decisions). Sign-in: "
    f"built-in accounts (--accounts, default development accounts in {DEV_ACCOUNTS}) or a "
    "trusted reverse proxy's user header (--proxy-header with --trusted-proxy and --roles). "
    "TOWER_INBOX_SESSION_SECRET keeps sessions valid across restarts."))
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on")
@click.option("--port", type=click.IntRange(0, 65535), default=8400, show_default=True,
              help="port (0: any free)")
@click.option("--accounts", type=click.Path(path_type=Path),
              help="built-in accounts (JSON; docs/inbox.md)")
@click.option("--proxy-header", metavar="NAME",
              help="trust this header's user name (e.g. X-Forwarded-User) ...")
@click.option("--trusted-proxy", "trusted_proxies", multiple=True, metavar="IP",
              help="... on connections from this proxy address only (repeatable)")
@click.option("--roles", type=click.Path(path_type=Path),
              help="with --proxy-header: JSON {user: [roles]}")
@click.option("--watcher-role", "watchers", multiple=True, metavar="ROLE",
              help="a role whose holders may read every run (and decide none); by default "
                   "a user sees only the runs whose gates their roles decide (repeatable)")
@click.option("--issuer", metavar="NAME",
              help="the inbox's signing key (`tower keys new NAME`), listed in the tenant's "
                   "roster with the roles it may vouch for (--vouches-for)  [default: inbox]")
@click.option("--watch-only", is_flag=True,
              help="no signing key: users see runs and watch them live (every run for a "
                   "--watcher-role), and nobody can decide here")
@click.option("--web-ui", metavar="URL", default=lambda: os.environ.get("TOWER_UI_URL"),
              help="the Temporal Web UI's address, for links to runs (default TOWER_UI_URL)")
@click.option("--tls-cert", help="serve HTTPS with this certificate (cookies: Secure)")
@click.option("--tls-key", help="the certificate's private key")
@json_option("print the inbox's address (and new development logins) as one JSON line")
@tenant_option
async def command(host: str, port: int, accounts: Path | None, proxy_header: str | None,
                  trusted_proxies: tuple[str, ...], roles: Path | None,
                  watchers: tuple[str, ...], issuer: str | None, watch_only: bool,
                  web_ui: str | None, tls_cert: str | None, tls_key: str | None,
                  as_json: bool) -> int:
    from tower.cli.agents import agents
    from tower.client import connect
    from tower.extras import require

    require("inbox", "tower inbox")
    from tower.cli.inbox.app import serving  # (the extra is there: starlette, uvicorn)

    if watch_only and issuer:
        raise CliError("--watch-only serves without a signing key: drop --issuer")
    issuer = None if watch_only else issuer or "inbox"
    if bool(tls_cert) != bool(tls_key):
        raise CliError("--tls-cert and --tls-key go together")
    agents()  # it offers only requests the project's agents could have made: it needs them
    client = await connect()
    config, created = build_config(
        client.namespace, issuer=issuer, accounts=accounts, proxy_header=proxy_header,
        trusted_proxies=trusted_proxies, roles=roles, watchers=watchers, web_ui=web_ui,
        tls=bool(tls_cert))
    async with serving(config, client, host=host, port=port, ssl_certfile=tls_cert,
                       ssl_keyfile=tls_key) as url:
        if as_json:
            print_json({"url": url, "tenant": client.namespace, "issuer": issuer,
                        "kid": config.issuer["kid"] if config.issuer else None,
                        "new_accounts": created}, line=True)
        else:
            _describe(url, client.namespace, issuer, config, created, accounts)
        await asyncio.Event().wait()  # until Ctrl-C
    return 0


def build_config(tenant: str, *, issuer: str | None, accounts: Path | None = None,
                 proxy_header: str | None = None, trusted_proxies: tuple[str, ...] = (),
                 roles: Path | None = None, watchers: tuple[str, ...] = (),
                 web_ui: str | None = None, tls: bool = False
                 ) -> tuple[InboxConfig, dict[str, str]]:
    """The inbox's configuration as the command line says (``issuer`` None: a watch-only
    inbox, with no signing key), and development passwords created now (to print once)."""
    from tower.cli.approvals import deployment
    from tower.cli.inbox.app import InboxConfig
    from tower.cli.inbox.identity import Accounts, ProxyAuth, dev_accounts
    from tower.client.errors import ClientError
    from tower.client.keys import load_key

    try:
        key = load_key(issuer) if issuer else None
    except ClientError as exc:
        raise CliError(f"{exc}; or serve with --watch-only, to watch runs and decide "
                       "nothing") from None

    secret = os.environ.get("TOWER_INBOX_SESSION_SECRET") or secrets.token_urlsafe(32)
    common: dict[str, Any] = {"tenant": tenant, "session_secret": secret, "secure_cookies": tls,
                              "web_ui": web_ui, "issuer": key, "store": STORE,
                              "deployment": deployment(tenant), "watchers": frozenset(watchers)}
    if proxy_header:
        if not trusted_proxies or roles is None:
            raise CliError("--proxy-header needs --trusted-proxy IP (the proxy's address) and "
                           "--roles FILE (who holds which role)")
        if accounts:
            raise CliError("use either --accounts or --proxy-header, not both")
        proxy = ProxyAuth(proxy_header, frozenset(trusted_proxies), ProxyAuth.load_roles(roles))
        return InboxConfig(proxy=proxy, **common), {}
    if accounts:
        return InboxConfig(accounts=Accounts.load(accounts), **common), {}
    dev, created = dev_accounts(DEV_ACCOUNTS)
    return InboxConfig(accounts=dev, **common), created


def _describe(url: str, tenant: str, issuer: str | None, config: InboxConfig,
              created: dict[str, str], accounts: Path | None) -> None:
    print(f"Tower inbox for tenant {tenant}: {url}", flush=True)
    if config.issuer is None:
        print("  watch only (no signing key): runs and their live streams, no decisions")
    else:
        print(f"  decisions signed with issuer key {issuer} ({config.issuer['kid']}): "
              "the tenant's roster must list it with the roles it may vouch for")
    from tower.activities.stores import StoreSettings

    # Which stores it reads live streams and large payloads from (docs/production.md).
    for name, where in StoreSettings.from_env().described().items():
        print(f"  {name}: {where}")
    for name, password in created.items():
        print(f"  development account {name} / {password}")
    if config.accounts is not None and not accounts:
        print(f"  (development accounts in {DEV_ACCOUNTS}; production: --accounts FILE "
              "or --proxy-header)", flush=True)

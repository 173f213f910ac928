"""`tower setup`: make the server the connection settings point at ready for Tower."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from tower.cli.output import json_option, print_json

if TYPE_CHECKING:
    from datetime import timedelta

    from temporalio.client import Client

    from tower.cli.server_setup import SetupReport


@click.command("setup", help=(
    "Prepare the Temporal server that the connection settings point at (TEMPORAL_ADDRESS, "
    "TEMPORAL_NAMESPACE, TEMPORAL_PROFILE and its TLS or API key): create the namespace and "
    "each --tenant's namespace when the server allows it, register every search attribute "
    "Tower uses, and say what an operator must do about anything setup cannot change. "
    "Running it again changes nothing. Exit code 0: ready; 1: an operator must act."))
@click.option("--tenant", "tenants", multiple=True, metavar="NAME",
              help="also set up tenant NAME's namespace (repeatable)")
@click.option("--retention", type=click.IntRange(1, 3650), default=30, show_default=True,
              metavar="DAYS", help="how long closed runs are kept, in namespaces setup creates")
@click.option("--wait", type=click.FloatRange(0), default=0, metavar="SECONDS",
              help="wait up to this long for the server to answer (a cluster starting)")
@json_option("print what was changed, found and left to do as one JSON object")
def command(tenants: tuple[str, ...], retention: int, wait: float, as_json: bool) -> Any:
    return _setup(list(tenants), retention, wait, as_json)


async def _setup(tenants: list[str], retention: int, wait: float, as_json: bool) -> int:
    from datetime import timedelta

    from tower.client.connection import check_tenant, connect_config

    for tenant in tenants:
        check_tenant(tenant)
    client = await _connect(wait)
    namespaces = [client.namespace, *tenants]
    report = await _until_served(client, namespaces, timedelta(days=retention), wait)
    address = connect_config()["target_host"]
    if as_json:
        print_json({"address": address, "namespaces": namespaces, "changed": report.changed,
                    "present": report.present, "actions": report.actions})
    else:
        _print(address, report)
    return 1 if report.actions else 0


def _print(address: str, report: SetupReport) -> None:
    print(f"Temporal at {address}")
    for line in report.changed:
        print(f"  changed: {line}")
    for line in report.present:
        print(f"  present: {line}")
    if not report.changed and not report.actions:
        print("nothing to change: the server is ready for Tower")
    for line in report.actions:
        print(f"  OPERATOR ACTION: {line}")


async def _connect(wait: float) -> Client:
    import asyncio

    from tower.client import connect
    from tower.client.connection import ServerUnreachable

    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while True:
        try:
            return await connect(check_namespace=False)
        except ServerUnreachable:
            if loop.time() >= deadline:
                raise
            await asyncio.sleep(1)


async def _until_served(client: Client, namespaces: list[str], retention: timedelta,
                        wait: float) -> SetupReport:
    import asyncio

    from temporalio.service import RPCError, RPCStatusCode

    from tower.cli.server_setup import setup

    # A cluster that has just started answers Unavailable until its services have joined.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while True:
        try:
            return await setup(client, namespaces, retention=retention)
        except RPCError as exc:
            if exc.status != RPCStatusCode.UNAVAILABLE or loop.time() >= deadline:
                raise
            await asyncio.sleep(1)

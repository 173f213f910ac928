"""`tower setup`: make the server the connection settings point at ready for Tower."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

import click
from temporalio.service import RPCError, RPCStatusCode

from tower.cli.output import json_option, print_json
from tower.cli.server_setup import setup
from tower.client import connect
from tower.client.connection import ServerUnreachable, check_tenant, connect_config

T = TypeVar("T")
E = TypeVar("E", bound=Exception)


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
async def command(tenants: tuple[str, ...], retention: int, wait: float, as_json: bool) -> int:
    for tenant in tenants:
        check_tenant(tenant)
    client = await _until(wait, lambda: connect(check_namespace=False), ServerUnreachable)
    namespaces = [client.namespace, *tenants]
    # A cluster that has just started answers Unavailable until its services have joined.
    report = await _until(wait, lambda: setup(client, namespaces,
                                                  retention=timedelta(days=retention)),
                          RPCError, lambda exc: exc.status == RPCStatusCode.UNAVAILABLE)
    address = connect_config()["target_host"]
    if as_json:
        print_json({"address": address, "namespaces": namespaces, "changed": report.changed,
                    "present": report.present, "actions": report.actions})
        return 1 if report.actions else 0
    print(f"Temporal at {address}")
    for line in report.changed:
        print(f"  changed: {line}")
    for line in report.present:
        print(f"  present: {line}")
    if not report.changed and not report.actions:
        print("nothing to change: the server is ready for Tower")
    for line in report.actions:
        print(f"  OPERATOR ACTION: {line}")
    return 1 if report.actions else 0


async def _until(wait: float, attempt: Callable[[], Awaitable[T]], error: type[E],
                 transient: Callable[[E], bool] = lambda exc: True) -> T:
    """``attempt()``, tried again each second while it fails with a transient ``error``,
    for up to ``wait`` seconds."""
    deadline = asyncio.get_running_loop().time() + wait
    while True:
        try:
            return await attempt()
        except error as exc:
            if not transient(exc) or asyncio.get_running_loop().time() >= deadline:
                raise
            await asyncio.sleep(1)

"""`tower setup`: make a Temporal server ready for Tower: namespaces and search attributes,
idempotently.

Any server the connection settings point at (the dev server, a self-hosted cluster, Temporal
Cloud through an envconfig profile with TLS or an API key). Without the search attributes a
run's workflow task fails and retries forever; without the namespace nothing starts. What
setup may not change (a namespace it is not allowed to create, an attribute of another type,
a server that refuses to add one) becomes an operator action, said plainly, never a guess.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TypeVar, cast

import click
from google.protobuf.duration_pb2 import Duration
from temporalio.api.enums.v1 import IndexedValueType, NamespaceState
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.api.workflowservice.v1 import (
    DescribeNamespaceRequest,
    RegisterNamespaceRequest,
)
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from tower.cli.output import json_option, print_json
from tower.client import connect
from tower.client.connection import ServerUnreachable, check_tenant, connect_config
from tower.contract import search

# Codes a server answers when the caller may not do something (Cloud, an authorizer).
REFUSED = (RPCStatusCode.PERMISSION_DENIED, RPCStatusCode.UNIMPLEMENTED,
           RPCStatusCode.UNAUTHENTICATED)
T = TypeVar("T")
E = TypeVar("E", bound=Exception)


@dataclass
class SetupReport:
    """What setup found, what it changed, and what only an operator can do."""

    changed: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)


def wanted_attributes() -> dict[str, IndexedValueType.ValueType]:
    # The protobuf stubs type enum values as ``IndexedValueType.ValueType``, a NewType of
    # int that exists only in the stubs: cast (a no-op at run time) instead of calling it.
    return {k.name: cast("IndexedValueType.ValueType", int(k.indexed_value_type))
            for k in search.ALL}


def kind_name(kind: int) -> str:
    """As the `temporal` CLI names it: INDEXED_VALUE_TYPE_KEYWORD_LIST -> KeywordList."""
    name = IndexedValueType.Name(cast("IndexedValueType.ValueType", kind))
    return name.removeprefix("INDEXED_VALUE_TYPE_").title().replace("_", "")


async def missing_attributes(client: Client) -> list[str]:
    """Tower's search attributes the client's namespace lacks (`tower setup` adds them)."""
    return sorted(set(wanted_attributes()) - set(await _listed(client, client.namespace)))


async def _listed(client: Client, namespace: str) -> dict[str, int]:
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace))
    return {**dict(listed.system_attributes), **dict(listed.custom_attributes)}


async def setup(client: Client, namespaces: list[str], *, retention: timedelta,
                ) -> SetupReport:
    """Namespaces first (created when missing and allowed), then each one's attributes."""
    report = SetupReport()
    for namespace in dict.fromkeys(namespaces):  # once each, in order
        if await _ensure_namespace(client, namespace, retention, report):
            await _ensure_attributes(client, namespace, report)
    return report


async def _ensure_namespace(client: Client, namespace: str, retention: timedelta,
                            report: SetupReport) -> bool:
    try:
        described = await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=namespace))
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise
    else:
        state = described.namespace_info.state
        if state != NamespaceState.NAMESPACE_STATE_REGISTERED:
            report.actions.append(
                f"namespace {namespace} is {NamespaceState.Name(state)}: Tower cannot use it; "
                "pick another namespace (TEMPORAL_NAMESPACE or --tenant)")
            return False
        days = described.config.workflow_execution_retention_ttl.ToTimedelta().days
        report.present.append(f"namespace {namespace} (retention {days} days)")
        return True
    try:
        await client.workflow_service.register_namespace(RegisterNamespaceRequest(
            namespace=namespace, description="Tower agents",
            workflow_execution_retention_period=Duration(seconds=int(retention.total_seconds()))))
    except RPCError as exc:
        if exc.status == RPCStatusCode.ALREADY_EXISTS:  # created meanwhile by someone else
            report.present.append(f"namespace {namespace}")
            return True
        if exc.status not in REFUSED:
            raise
        report.actions.append(
            f"namespace {namespace} does not exist and this server does not let Tower create "
            f"it ({exc.message}). Create it as an administrator (Temporal Cloud: its web "
            f"console or `tcld namespace create`; self-hosted: `temporal operator namespace "
            f"create --namespace {namespace}`), then run `tower setup` again")
        return False
    report.changed.append(f"created namespace {namespace} (retention {retention.days} days)")
    # Until the servers' caches (refreshed every few seconds) know the new namespace, adding
    # its search attributes answers 'namespace not found'.
    await until(60, lambda: _listed(client, namespace), RPCError,
                lambda exc: exc.status == RPCStatusCode.NOT_FOUND, every=0.25)
    return True


async def _ensure_attributes(client: Client, namespace: str, report: SetupReport) -> None:
    wanted = wanted_attributes()
    try:
        known = await _listed(client, namespace)
        clash = [f"{name} is {kind_name(known[name])}, Tower needs {kind_name(kind)}"
                 for name, kind in wanted.items() if name in known and known[name] != kind]
        if clash:  # never replaced: an operator decides
            report.actions.append(
                f"search attributes of namespace {namespace} with the wrong type: "
                f"{'; '.join(clash)}. A search attribute's type cannot change: remove it "
                f"(`temporal operator search-attribute remove --namespace {namespace} --name "
                "NAME`) if nothing else uses it, or run Tower in another namespace; then run "
                "`tower setup` again")
            return
        added = {name: kind for name, kind in wanted.items() if name not in known}
        if added:
            await client.operator_service.add_search_attributes(AddSearchAttributesRequest(
                namespace=namespace, search_attributes=added))
    except RPCError as exc:
        if exc.status not in (*REFUSED, RPCStatusCode.INVALID_ARGUMENT,
                              RPCStatusCode.FAILED_PRECONDITION):
            raise
        flags = " ".join(f"--name {n} --type {kind_name(k)}" for n, k in wanted.items())
        report.actions.append(
            f"the server refused to add Tower's search attributes to namespace {namespace} "
            f"({exc.message}). An administrator adds them (Temporal Cloud: its web console or "
            f"`tcld namespace search-attributes add`; self-hosted: `temporal operator "
            f"search-attribute create --namespace {namespace} {flags}`); until then every "
            "run's workflow task fails and retries")
        return
    present = sorted(set(wanted) - set(added))
    if added:
        report.changed.append(f"added search attributes to {namespace}: {', '.join(sorted(added))}")
    if present:
        report.present.append(f"search attributes of {namespace}: {', '.join(present)}")


@click.command("setup", help=(
    "Prepare the Temporal server that the connection settings point at (TEMPORAL_ADDRESS, "
    "TEMPORAL_NAMESPACE, TEMPORAL_PROFILE and its TLS or API key): create the namespace and "
    "each --tenant's namespace when the server allows it, register every search attribute "
    "Tower uses, and say what an operator must do about anything setup cannot change. "
    "Running it again changes nothing. Exit code 0: ready; 1: an operator must act."))
@click.option("--tenant", "tenants", multiple=True, metavar="NAME", type=check_tenant,
              help="also set up tenant NAME's namespace (repeatable)")
@click.option("--retention", type=click.IntRange(1, 3650), default=30, show_default=True,
              metavar="DAYS", help="how long closed runs are kept, in namespaces setup creates")
@click.option("--wait", type=click.FloatRange(0), default=0, metavar="SECONDS",
              help="wait up to this long for the server to answer (a cluster starting)")
@json_option("print what was changed, found and left to do as one JSON object")
async def command(tenants: tuple[str, ...], retention: int, wait: float, as_json: bool) -> int:
    client = await until(wait, lambda: connect(check_namespace=False), ServerUnreachable)
    namespaces = [client.namespace, *tenants]
    # A cluster that has just started answers Unavailable until its services have joined.
    report = await until(wait, lambda: setup(client, namespaces,
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


async def until(wait: float, attempt: Callable[[], Awaitable[T]], error: type[E],
                transient: Callable[[E], bool] = lambda exc: True, every: float = 1) -> T:
    """``attempt()``, tried again ``every`` seconds while it fails with a transient
    ``error``, for up to ``wait`` seconds."""
    deadline = asyncio.get_running_loop().time() + wait
    while True:
        try:
            return await attempt()
        except error as exc:
            if not transient(exc) or asyncio.get_running_loop().time() >= deadline:
                raise
            await asyncio.sleep(every)

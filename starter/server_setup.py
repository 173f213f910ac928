"""Register Tower's search attributes on a Temporal server that is not the dev server.

`tower dev` and the tests register them at start-up; a production cluster (the
`temporal-setup` service of docker-compose.yml) runs ``python -m starter.server_setup``
once. Without them a run's workflow task fails and retries forever. Idempotent: an
attribute already there with the right type is left alone; one with another type is
an error, never silently replaced.
"""

from __future__ import annotations

import asyncio
import sys
from typing import cast

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.service import RPCError

from starter.connection import ServerUnreachable, connect
from tower.contract import search


class SearchAttributeClash(Exception):
    """An attribute Tower needs exists with another type: an operator must decide."""


async def register_search_attributes(client: Client, namespace: str | None = None) -> list[str]:
    """Add every attribute in ``search.ALL`` that the namespace lacks; return the added names."""
    namespace = namespace or client.namespace
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace))
    known = {**dict(listed.system_attributes), **dict(listed.custom_attributes)}
    # The protobuf stubs type enum values as ``IndexedValueType.ValueType``, a NewType of
    # int that exists only in the stubs: cast (a no-op at run time) instead of calling it.
    wanted = {k.name: cast("IndexedValueType.ValueType", int(k.indexed_value_type))
              for k in search.ALL}
    clash = [f"{name} is {IndexedValueType.Name(known[name])}, Tower needs "
             f"{IndexedValueType.Name(kind)}" for name, kind in wanted.items()
             if name in known and known[name] != kind]
    if clash:
        raise SearchAttributeClash("search attributes with the wrong type: " + "; ".join(clash))
    missing = {name: kind for name, kind in wanted.items() if name not in known}
    if missing:
        await client.operator_service.add_search_attributes(AddSearchAttributesRequest(
            namespace=namespace, search_attributes=missing))
    return sorted(missing)


async def main(wait_seconds: float = 180) -> int:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_seconds
    while True:
        try:
            client = await connect()
            added = await register_search_attributes(client)
            break
        except SearchAttributeClash as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except (ServerUnreachable, RPCError) as exc:  # still creating its schemas: wait
            if loop.time() > deadline:
                print(f"error: no usable Temporal server after {wait_seconds:g}s: {exc}",
                      file=sys.stderr)
                return 2
            await asyncio.sleep(3)
    print(f"search attributes on {client.namespace}: "
          f"{', '.join(added) + ' added' if added else 'all present'}")
    return 0

if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

"""Moved to ``tower.client`` (the connection is the client's); kept so that code importing
it from here (a project's worker.py) goes on working."""

from tower.client.connection import (
    DEFAULT_ADDRESS,
    TASK_QUEUE,
    ServerUnreachable,
    UnknownTenant,
    check_tenant,
    connect,
    connect_config,
    use_tenant,
)

__all__ = ["DEFAULT_ADDRESS", "TASK_QUEUE", "ServerUnreachable", "UnknownTenant",
           "check_tenant", "connect", "connect_config", "use_tenant"]

"""Serve the inbox with uvicorn on the caller's event loop (the Temporal client's loop)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import uvicorn
from temporalio.client import Client

from tower.cli.inbox.app import InboxConfig, create_app

STOP_GRACE_SECONDS = 3


def _bound_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


@contextlib.asynccontextmanager
async def serving(config: InboxConfig, client: Client, *, host: str = "127.0.0.1",
                  port: int = 0, ssl_certfile: str | None = None,
                  ssl_keyfile: str | None = None) -> AsyncIterator[str]:
    """Serve until the block ends; yields the base URL (port 0: a free port)."""
    sock = _bound_socket(host, port)
    server = uvicorn.Server(uvicorn.Config(
        create_app(config, client), log_level="warning", ssl_certfile=ssl_certfile,
        ssl_keyfile=ssl_keyfile, lifespan="off", proxy_headers=False,
        # A page left open holds its live stream (a run page, the list) for as long as the
        # run lives: stopping waits this long for open responses, then closes them.
        timeout_graceful_shutdown=STOP_GRACE_SECONDS))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()  # raises why it could not start
            await asyncio.sleep(0.05)
        scheme = "https" if ssl_certfile else "http"
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
        yield f"{scheme}://{shown}:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        await task
        sock.close()

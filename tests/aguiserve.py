"""A team's own ASGI app mounting Tower's AG-UI endpoint with one call, served as a process
of its own (tests/test_agui.py starts two): ``uvicorn --factory aguiserve:make``.

Its users are named by a header a trusted proxy sets (AGUI_USERS: ``name=role,role;...``);
it signs their answers under the ``inbox`` issuer key of the tenant's roster."""

from __future__ import annotations

import os

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Mount

from tower import agui
from tower.client import connect
from tower.client.keys import load_key
from workflows.refund import RefundAgent


def make() -> Starlette:
    users = {name: tuple(roles.split(",")) for name, roles in (
        item.split("=") for item in os.environ["AGUI_USERS"].split(";"))}

    def who(request: Request) -> tuple[str, tuple[str, ...]] | None:
        name = request.headers.get("x-forwarded-user", "")
        return (name, users[name]) if name in users else None

    return Starlette(routes=[Mount("/agui", agui.app(
        connect, agents={"refund": RefundAgent}, task_queue=os.environ["AGUI_TASK_QUEUE"],
        issuer=load_key("inbox"), who=who))])

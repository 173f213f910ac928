"""`tower demo --keep-server`: leave runs waiting in the approvers' inbox, with the inbox and
a worker running in the background, and print where to sign in and as whom."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid

from temporalio.client import Client

from tower.activities.trust import trust_dir
from tower.cli import project
from tower.cli.agents import agents
from tower.cli.cmd_inbox import DEV_ACCOUNTS
from tower.cli.common import CliError
from tower.cli.demo_data import DemoData
from tower.cli.devserver import free_port, port_free, stop
from tower.cli.inbox.identity import dev_accounts
from tower.cli.inbox.visibility import waiting_run
from tower.cli.trust_files import enrol
from tower.client import start_run

DEMO_LOGINS = (("alice", "manager"), ("dave", "dba"))
ISSUER = "inbox"  # the inbox's own key, in the roster as an issuer for these roles
VOUCHES_FOR = ["manager", "dba"]


async def park_for_inbox(client: Client, task_queue: str) -> list[str]:
    """A refund and a destructive migration, left waiting at their gates (the inbox's
    issuer key is put in the tenant's roster first: runs read the roster as they start)."""
    enrol(trust_dir(), client.namespace, ISSUER, vouches_for=VOUCHES_FOR)
    runs = [("refund", {"message": "Please refund $1,800 on invoice INV-2004"}),
            ("migration", {"database": "shop", "script": "DROP TABLE legacy_notes;"})]
    ids = []
    for agent, request in runs:
        run_id = f"demo-inbox-{agent}-{uuid.uuid4().hex[:6]}"
        cls = agents()[agent]
        await start_run(client, cls, cls.Input.model_validate(request),
                        id=run_id, task_queue=task_queue)
        ids.append(run_id)
    async with asyncio.timeout(60):
        for run_id in ids:
            # Listed once the worker's attestation of the request is published too.
            while not await _attested(client, run_id):
                await asyncio.sleep(0.2)
    return ids


async def _attested(client: Client, run_id: str) -> bool:
    view = (await waiting_run(client, run_id))[1]
    return view is not None and bool(view.attestation)


async def start_in_background(mine: DemoData, web_ui: str | None) -> tuple[str, list[int]]:
    """A worker (on this demo's task queue and data) and `tower inbox`, detached; the
    inbox's address and both process ids. Stopped again if the inbox does not come up or
    the demo is interrupted first."""
    _, created = dev_accounts(DEV_ACCOUNTS)
    port = 8400 if port_free(8400) else free_port()
    folder = project.root()  # the example's worker also serves a demo run in an empty folder
    # The inbox lists only requests attested on the deployment's queues: this demo's.
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TOWER_DB": str(mine.tools_db.resolve()),
           "TOWER_TASK_QUEUES": mine.task_queue,
           "PYTHONPATH": os.pathsep.join([str(folder), *filter(None, [
               os.environ.get("PYTHONPATH")])])}
    ui = ["--web-ui", web_ui] if web_ui else []
    with mine.inbox_log.open("ab") as log:
        worker = subprocess.Popen([sys.executable, "-m", "worker", "--task-queue",
                                   mine.task_queue], stdout=log, stderr=log, env=env,
                                  start_new_session=True)
        inbox = subprocess.Popen([sys.executable, "-m", "tower.cli.cli", "--project", str(folder),
                                  "inbox", "--port", str(port), "--issuer", ISSUER, *ui],
                                 stdout=log, stderr=log, start_new_session=True, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        await _wait_healthy(url, inbox, mine)
    except BaseException:
        for proc in (inbox, worker):
            stop(proc)
        raise
    return url, [worker.pid, inbox.pid]


async def serve_inbox(waiting: list[str], mine: DemoData, web_ui: str | None) -> None:
    """Start the inbox and a worker in the background; print where and as whom to sign in."""
    url, pids = await start_in_background(mine, web_ui)
    print(f"\nApprovers' inbox: {url}  ({len(waiting)} runs wait there: {', '.join(waiting)})")
    for name, password, role in logins():
        print(f"  sign in as {name} / {password}  ({role})")
    print(f"  (the inbox and a worker keep running in the background: `kill "
          f"{' '.join(map(str, pids))}` stops them; their log is {mine.inbox_log})")


def logins() -> list[tuple[str, str, str]]:
    """(name, password, role) of the demo approvers, from the development accounts."""
    passwords = json.loads(DEV_ACCOUNTS.with_suffix(".passwords.json").read_text())
    return [(name, passwords[name], role) for name, role in DEMO_LOGINS]


async def _wait_healthy(url: str, proc: subprocess.Popen[bytes], mine: DemoData,
                        seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise CliError(f"tower inbox exited with code {proc.returncode}; see "
                           f"{mine.inbox_log}")
        try:
            await asyncio.to_thread(_get, f"{url}/healthz")
            return
        except OSError:
            await asyncio.sleep(0.3)
    raise CliError(f"tower inbox did not answer at {url}; see {mine.inbox_log}")


def _get(url: str) -> None:
    with urllib.request.urlopen(url, timeout=2):
        pass

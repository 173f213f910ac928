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
from tower.cli.common import start_run
from tower.cli.devprocess import free_port, port_free
from tower.cli.devserver import DATA_DIR
from tower.cli.trust_files import enrol
from tower.inbox.identity import dev_accounts
from tower.inbox.visibility import waiting_run

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
        await start_run(client, agent, agents()[agent].Input.model_validate(request),
                        id=run_id, task_queue=task_queue)
        ids.append(run_id)
    async with asyncio.timeout(60):
        for run_id in ids:
            while (await waiting_run(client, run_id))[1] is None:
                await asyncio.sleep(0.2)
    return ids


def start_in_background(task_queue: str, web_ui: str | None) -> tuple[str, list[int]]:
    """A worker and `tower inbox`, detached; the inbox's address and both process ids."""
    DATA_DIR.mkdir(exist_ok=True)
    _, created = dev_accounts(DEV_ACCOUNTS)
    port = 8400 if port_free(8400) else free_port()
    log = (DATA_DIR / "inbox.log").open("ab")
    # The demo's project (this one, or Tower's example outside any): both processes serve
    # its agents, whatever folder the demo runs in.
    folder = project.root()
    path = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}
    worker = subprocess.Popen([sys.executable, "-m", "worker", "--task-queue", task_queue],
                              stdout=log, stderr=log, start_new_session=True, env=env)
    ui = ["--web-ui", web_ui] if web_ui else []
    inbox = subprocess.Popen([sys.executable, "-m", "tower.cli.cli", "--project", str(folder),
                              "inbox", "--port", str(port), "--issuer", ISSUER, *ui],
                             stdout=log, stderr=log, start_new_session=True, env=env)
    url = f"http://127.0.0.1:{port}"
    _wait_healthy(url, inbox)
    return url, [worker.pid, inbox.pid]


def serve_inbox(waiting: list[str], task_queue: str, web_ui: str | None) -> None:
    """Start the inbox and a worker in the background; print where and as whom to sign in."""
    url, pids = start_in_background(task_queue, web_ui)
    print(f"\nApprovers' inbox: {url}  ({len(waiting)} runs wait there: {', '.join(waiting)})")
    for name, password, role in logins():
        print(f"  sign in as {name} / {password}  ({role})")
    print(f"  (the inbox and a worker keep running in the background: `kill "
          f"{' '.join(map(str, pids))}` stops them; their log is {DATA_DIR / 'inbox.log'})")


def logins() -> list[tuple[str, str, str]]:
    """(name, password, role) of the demo approvers, from the development accounts."""
    passwords = json.loads(DEV_ACCOUNTS.with_suffix(".passwords.json").read_text())
    return [(name, passwords[name], role) for name, role in DEMO_LOGINS]


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"tower inbox exited with code {proc.returncode}; see "
                               f"{DATA_DIR / 'inbox.log'}")
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"tower inbox did not answer at {url}; see {DATA_DIR / 'inbox.log'}")

"""`tower demo`: server (if needed) + worker + every demo run, printed as it happens; then
a refund paused at a gate and approved, a destructive migration paused and rejected, with
decisions sent by the same code as `tower approve`.

Where one demo keeps what it makes, so every demo starts from the same data: a folder of its
own, ``.tower/demo/<tag>/`` (the tools' database, messages, the shop database, the SDK's log),
and a task queue of its own, so no earlier demo's background worker (``--keep-server``)
serves its runs. Only the newest ``KEEP`` folders are kept.

With ``--keep-server`` it leaves runs waiting in the approvers' inbox, with the inbox and a
worker running in the background, and prints where to sign in and as whom.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import click
import httpx
from pydantic import BaseModel
from temporalio.client import Client
from temporalio.service import RPCError

from tower.activities.model import ModelSettings
from tower.activities.trust import trust_dir
from tower.cli import project
from tower.cli.agents import agents
from tower.cli.approvals import print_outcome as print_decision
from tower.cli.approvals import print_waiting
from tower.cli.cmd_inbox import DEV_ACCOUNTS
from tower.cli.cmd_run import print_outcome
from tower.cli.common import CliError
from tower.cli.devserver import (
    DATA_DIR,
    free_port,
    port_free,
    prepare_dev_setup,
    server_if_needed,
    stop,
)
from tower.cli.inbox.identity import dev_accounts
from tower.cli.live import follow
from tower.cli.output import json_option, tenant_option
from tower.cli.server_setup import missing_attributes
from tower.cli.trust_files import dev_trust, enrol
from tower.cli.ui import run_link, ui_base
from tower.client import decide, start_run
from tower.client._pending import pending_of
from tower.client.connection import connect_config
from tower.client.keys import config_dir
from tower.contract import names
from tower.contract.decisions import Verdict

# (agent, input, what it shows): the inputs are the example agents' own Input models.
RUNS: list[tuple[str, dict[str, Any], str]] = [
    ("account", dict(question="Check my account status, id ACC-1001"),
     "a bounded ReAct loop: reason ⇄ lookup_account"),
    ("account", dict(question="Check account ACC-9999 please"),
     "the same agent on an account that does not exist: the loop budget stops it"),
    ("support", dict(message="I was charged twice on invoice INV-2001"),
     "classify, then route in code to the billing desk"),
    ("support", dict(message="Login fails with error 500 since this morning"),
     "classify, then route in code to technical support"),
    ("onboarding", dict(message=(
        "I'm Grace Hopper from Compiler Works, email grace@navy.invalid or "
        "grace@cobol.dev")),
     "per-state tools; a rejected e-mail sends the run back to collect_info, then provisions"),
    ("research", dict(topic="durable execution for LLM agents"),
     "hybrid exits: the model signals 'done', code holds it until 2 sources / 100 words"),
    ("lifecycle", dict(goal="Check account ACC-1001 and invoice INV-2001"),
     "event-driven guard table: plans and tool results arrive as events"),
    ("order", dict(text="Please send 2 x WIDGET-1 and 1 x GADGET-2 to 1 Main St, "
                                "Springfield, US"),
     "model parses, then stock, tax, payment, shipment in code; model confirms"),
    ("order", dict(text="3 x WIDGET-1 to 5 Rue Neuve, Paris, FR", card="tok_declined"),
     "the same agent with a declined card: stock released, run ends FAILED with the reason"),
]


def requests() -> list[tuple[str, BaseModel, str]]:
    """``RUNS`` with each input validated by its agent's own Input model."""
    return [(agent, agents()[agent].Input.model_validate(given), what)
            for agent, given, what in RUNS]


@click.command("demo", help=(
    "Start the embedded dev server if none answers, start a worker, run the demo agents and "
    "print their transitions, results and Web UI links."))
@click.option("--keep-server", is_flag=True,
              help="leave a dev server this command started running (to browse the UI)")
@json_option("one JSON line per demo run (agent, run, status, Web UI link), the story on stderr")
@tenant_option
async def command(keep_server: bool, as_json: bool) -> int:
    if project.find() is None:  # not in a project: Tower's own example
        folder = project.example()
        if folder is None:
            raise CliError("the demo runs Tower's example application, which this "
                           "installation does not have (a source checkout does); "
                           "`tower new NAME` makes a project of your own")
        print(f"no Tower project here: the demo runs Tower's example application ({folder})")
        project.use(folder)
    build_worker = project.module("worker").build_worker
    settings = ModelSettings.from_env()
    data = sys.stdout
    # Under --json the story goes to stderr and stdout carries one JSON line per run.
    with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
        print(f"model: {settings.describe()}")
        mine = DemoData().make()
        sdk_logs_to(mine.log)  # before the first client: the runtime's logging is fixed then
        print(f"demo data: {mine.folder} (tools' database, messages, SDK log; new for each "
              f"demo, `rm -rf {DEMOS}` removes them)")
        async with server_if_needed(keep=keep_server) as server:
            if not server.started_here:
                await _check_set_up(server.client)
            # What `tower dev` prepares: the tenant's roster and policy, or no run may start.
            for line in prepare_dev_setup([] if server.client.namespace == "default"
                                          else [server.client.namespace]):
                print(line)
            namespace = server.client.namespace
            base = server.ui_url if server.started_here else await ui_base(server.client)
            links: list[str] = []

            def done(agent: str, run_id: str) -> None:
                link = run_link(base, namespace, run_id)
                if link:
                    links.append(link)
                if as_json:
                    print(json.dumps({"agent": agent, "run": run_id, "web_ui": link}),
                          file=data, flush=True)

            queue = mine.task_queue
            async with build_worker(server.client, task_queue=queue, db_path=mine.tools_db,
                                    models=settings):
                for agent, request, what in RUNS:
                    done(agent, (await _start(server.client, queue, agent, request, what))[0])
                # Runs that pause at an approval gate and get a human decision.
                for agent, run_id in await gated_runs(server.client, queue, mine.tools_db):
                    done(agent, run_id)
                # With --keep-server, a refund and a migration stay for the inbox.
                waiting = (await park_for_inbox(server.client, queue) if keep_server else [])
            if links:
                print("\nWeb UI (each run, with its history and current details):")
                for link in links:
                    print(f"  {link}")
            if waiting:
                await serve_inbox(waiting, mine, base)
            if server.started_here and keep_server:
                print(f"\nThe dev server this demo started keeps running (pid {server.pid}): "
                      f"`kill {server.pid}` stops it; its runs are kept in "
                      f"{DATA_DIR / 'temporal.sqlite'}.")
            elif server.started_here:
                print("\nThe dev server this demo started is stopped now; its runs are kept "
                      "in .tower/temporal.sqlite. `tower dev` serves them again on the Web UI.")
    return 0


async def _check_set_up(client: Client) -> None:
    """A server the demo did not start may lack Tower's search attributes: no run could
    start there. (Where listing them is not allowed, the first start says what is wrong.)"""
    try:
        missing = await missing_attributes(client)
    except RPCError:
        return
    if missing:
        raise CliError(f"the Temporal server at {connect_config()['target_host']} is not set "
                       f"up for Tower: namespace {client.namespace} lacks the search attributes "
                       f"{', '.join(missing)}; `tower setup` registers them")


async def _start(client: Client, task_queue: str, agent: str, given: dict[str, Any],
                 what: str) -> tuple[str, str]:
    """Start a demo run of ``agent`` and follow it; its id and the status it stopped at."""
    cls = agents()[agent]
    request = cls.Input.model_validate(given)
    run_id = f"demo-{agent}-{uuid.uuid4().hex[:6]}"
    print(f"\n== {agent}: {what}\n   input: {request.model_dump_json(exclude_none=True)}"
          f"\n   run: {run_id}")
    handle = await start_run(client, cls, request, id=run_id, task_queue=task_queue)
    status = await follow(handle)
    print_outcome(status, await handle.query(names.STATE.name, result_type=dict))
    return run_id, status


async def gated_runs(client: Client, task_queue: str, tools: Path) -> list[tuple[str, str]]:
    # Approver keys for alice and dana (made once, in their config dir) and the tenant's
    # roster and policy in the trust dir, unless they are there already.
    roster = dev_trust(trust_dir(), client.namespace,
                       approvers={"alice": ["manager"], "dana": ["dba"]})
    kids = ", ".join(f"{m.name} ({'/'.join(m.roles)}): {m.keys[-1].kid}"
                     for m in roster.members if m.name in ("alice", "dana"))
    print(f"\napprovers sign with their own keys in {config_dir() / 'keys'}; the tenant's "
          f"roster ({trust_dir() / client.namespace / 'roster.json'}) lists {kids}")
    # The demo's application database, beside its tools' database (created once).
    project.module("activities.tools.migrations").create_example_databases(tools)
    refund = await _gated(
        client, task_queue, "refund", dict(message="Please refund $1,200 on invoice INV-2004"),
        "a human review gate: over the $500 limit the run waits for a manager",
        Verdict.APPROVE, approver="alice", role="manager", note="partial refund agreed",
        edits={"amount_cents": 100000})
    # It drops customers under another table's name: the findings name customers.
    migration = await _gated(
        client, task_queue, "migration", dict(
            database="shop", script="DROP TABLE legacy_notes;\n"
                                    "ALTER TABLE customers RENAME TO legacy_notes;\n"
                                    "DROP TABLE legacy_notes;"),
        "a destructive migration waits for a DBA; rejected, nothing changes",
        Verdict.REJECT, approver="dana", role="dba", note="that drops customers")
    return [("refund", refund), ("migration", migration)]


async def _gated(client: Client, task_queue: str, agent: str, request: dict[str, Any],
                 what: str, verdict: Verdict, *, approver: str, role: str, note: str,
                 edits: dict[str, Any] | None = None) -> str:
    run_id, status = await _start(client, task_queue, agent, request, what)
    if status != "AWAITING_APPROVAL":
        return run_id
    handle = client.get_workflow_handle(run_id)
    print_waiting(await handle.query(names.APPROVALS.name, result_type=dict))
    sets = "".join(f" --set {k}={v}" for k, v in (edits or {}).items())
    print(f"\n$ tower {verdict.value} {run_id} --by {approver}{sets} --note '{note}'")
    out = await decide(client, run_id, verdict, approver=approver, role=role,
                              note=note, edits=edits, say=print)
    assert out is not None
    print_decision(out)
    status = await follow(handle, skip=out.requested_step)
    print_outcome(status, await handle.query(names.STATE.name, result_type=dict))
    return run_id


# --- the demo's own data ---

DEMOS = DATA_DIR / "demo"
KEEP = 5  # the newest demos' folders kept: an older demo's --keep-server worker may still run


@dataclass
class DemoData:
    """One demo's own folder and task queue, named by its tag (tags sort by time)."""

    tag: str = field(
        default_factory=lambda: f"{datetime.now():%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:4]}")

    def __post_init__(self) -> None:
        self.folder = DEMOS / self.tag
        self.tools_db = self.folder / "tools.sqlite"
        self.log = self.folder / "demo.log"
        self.inbox_log = self.folder / "inbox.log"
        self.task_queue = f"tower-demo-{self.tag}"

    def make(self) -> DemoData:
        """Its folder, made; all but the newest ``KEEP`` demo folders, this one among them,
        removed."""
        self.folder.mkdir(parents=True, exist_ok=True)
        others = sorted(p for p in DEMOS.glob("*") if p.is_dir() and p != self.folder)
        for folder in others[:max(len(others) - (KEEP - 1), 0)]:
            shutil.rmtree(folder, ignore_errors=True)
        return self


def sdk_logs_to(path: Path) -> None:
    """The SDK's own logs (its core's retry warnings, a traceback for each activity a demo
    run fails on purpose) go to ``path``, not the terminal the demo tells its story on.
    Before any client connects: a runtime's logging is fixed when it is made."""
    from temporalio.runtime import (
        LogForwardingConfig,
        LoggingConfig,
        Runtime,
        TelemetryConfig,
        TelemetryFilter,
    )

    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    sdk = logging.getLogger("temporalio")
    sdk.addHandler(handler)
    sdk.setLevel(logging.INFO)
    sdk.propagate = False
    core = LoggingConfig(filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),
                         forwarding=LogForwardingConfig(logger=logging.getLogger("temporalio.core")))
    Runtime.set_default(Runtime(telemetry=TelemetryConfig(logging=core)),
                        error_if_already_set=False)


# --- --keep-server: runs left waiting in the approvers' inbox ---

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
    view = (await pending_of(client, run_id))[1]
    return view is not None and bool(view.attestation)


async def serve_inbox(waiting: list[str], mine: DemoData, web_ui: str | None) -> None:
    """A worker (on this demo's task queue and data) and `tower inbox`, detached, stopped
    again if the inbox does not come up or the demo is interrupted first; then where and as
    whom to sign in."""
    dev_accounts(DEV_ACCOUNTS)
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
        await _wait_healthy(url, inbox, mine.inbox_log)
    except BaseException:
        for proc in (inbox, worker):
            stop(proc)
        raise
    print(f"\nApprovers' inbox: {url}  ({len(waiting)} runs wait there: {', '.join(waiting)})")
    passwords = json.loads(DEV_ACCOUNTS.with_suffix(".passwords.json").read_text())
    for name, role in DEMO_LOGINS:
        print(f"  sign in as {name} / {passwords[name]}  ({role})")
    print(f"  (the inbox and a worker keep running in the background: `kill "
          f"{worker.pid} {inbox.pid}` stops them; their log is {mine.inbox_log})")


async def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path,
                        seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    async with httpx.AsyncClient(timeout=2) as http:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise CliError(f"tower inbox exited with code {proc.returncode}; see {log}")
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get(f"{url}/healthz")).is_success:
                    return
            await asyncio.sleep(0.3)
    raise CliError(f"tower inbox did not answer at {url}; see {log}")

"""`tower demo`: server (if needed) + worker + every demo run, printed as it happens."""

from __future__ import annotations

import argparse
import uuid

from pydantic import BaseModel
from temporalio.client import Client

from activities.model import ModelSettings
from starter.cmd_run import print_outcome
from starter.common import follow, ui_link
from starter.connection import connect_config
from starter.demo_gates import gated_runs
from starter.devprocess import server_if_needed
from worker import build_worker
from workflows.account import AccountRequest
from workflows.lifecycle import LifecycleRequest
from workflows.onboarding import OnboardingRequest
from workflows.order import OrderRequest
from workflows.research import ResearchRequest
from workflows.support import SupportRequest

DEMO_QUEUE = "tower-demo"
# The tools' database outlives a demo: a fresh address keeps onboarding repeatable.
_TAG = uuid.uuid4().hex[:6]

RUNS: list[tuple[str, BaseModel, str]] = [
    ("account", AccountRequest(question="Check my account status, id ACC-1001"),
     "a bounded ReAct loop: reason ⇄ lookup_account"),
    ("account", AccountRequest(question="Check account ACC-9999 please"),
     "the same agent on an account that does not exist: the loop budget stops it"),
    ("support", SupportRequest(message="I was charged twice on invoice INV-2001"),
     "classify, then route in code to the billing desk"),
    ("support", SupportRequest(message="Login fails with error 500 since this morning"),
     "classify, then route in code to technical support"),
    ("onboarding", OnboardingRequest(message=(
        "I'm Grace Hopper from Compiler Works, email grace@navy.invalid or "
        f"grace.{_TAG}@cobol.dev")),
     "per-state tools; a rejected e-mail sends the run back to collect_info, then provisions"),
    ("research", ResearchRequest(topic="durable execution for LLM agents"),
     "hybrid exits: the model signals 'done', code holds it until 2 sources / 100 words"),
    ("lifecycle", LifecycleRequest(goal="Check account ACC-1001 and invoice INV-2001"),
     "event-driven guard table: plans and tool results arrive as events"),
    ("order", OrderRequest(text="Please send 2 x WIDGET-1 and 1 x GADGET-2 to 1 Main St, "
                                "Springfield, US"),
     "model parses, then stock, tax, payment, shipment in code; model confirms"),
    ("order", OrderRequest(text="3 x WIDGET-1 to 5 Rue Neuve, Paris, FR", card="tok_declined"),
     "the same agent with a declined card: stock released, run ends FAILED with the reason"),
]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo", help="run the demo: server, worker and every demo agent",
        description="Start the embedded dev server if none answers, start a worker, run the "
                    "demo agents and print their transitions, results and Web UI links.")
    p.add_argument("--keep-server", action="store_true",
                   help="leave a dev server this command started running (to browse the UI)")
    p.set_defaults(handler=run)


async def run(args: argparse.Namespace) -> int:
    settings = ModelSettings.from_env()
    print(f"model: {settings.describe()}")
    async with server_if_needed(keep=args.keep_server) as server:
        config = connect_config()
        links: list[str] = []
        async with build_worker(server.client, task_queue=DEMO_QUEUE, models=settings):
            for agent, request, what in RUNS:
                run_id = await _one(server.client, agent, request, what)
                links.append(ui_link(config["target_host"], config.get("namespace", "default"),
                                     run_id, server.ui_port))
            # Runs that pause at an approval gate and get a human decision.
            for run_id in await gated_runs(server.client, DEMO_QUEUE):
                links.append(ui_link(config["target_host"], config.get("namespace", "default"),
                                     run_id, server.ui_port))
        print("\nWeb UI (each run, with its history and current details):")
        for link in links:
            print(f"  {link}")
        if server.started_here and not args.keep_server:
            print("\nThe dev server this demo started is stopped now; its runs are kept in "
                  ".tower/temporal.sqlite. `tower dev` serves them again on the Web UI.")
    return 0


async def _one(client: Client, agent: str, request: BaseModel, what: str) -> str:
    run_id = f"demo-{agent}-{uuid.uuid4().hex[:6]}"
    print(f"\n== {agent}: {what}\n   input: {request.model_dump_json()}\n   run: {run_id}")
    handle = await client.start_workflow(agent, request, id=run_id, task_queue=DEMO_QUEUE)
    status = await follow(handle)
    print_outcome(status, await handle.query("state", result_type=dict))
    return run_id

"""`tower history export RUN` and `tower replay PATH...`: histories out of the server,
and back through the current code."""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

from temporalio.client import Client, WorkflowHistory
from temporalio.service import RPCError, RPCStatusCode

from starter.common import CliError, add_run_arguments
from starter.connection import connect, connect_config
from starter.histories import HistoryError, Replayed, load, replay


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("history", help="export a run's event history",
                       description="Work with a run's Temporal event history.")
    hsub = p.add_subparsers(dest="history_command", metavar="ACTION", required=True)
    e = hsub.add_parser(
        "export", help="write a run's history as JSON",
        description="Write the event history of RUN (a workflow id) as JSON, the format the "
                    "Web UI and `temporal workflow show --output json` produce. The file's "
                    "name is the workflow id (plus @RUN_ID for a chosen run), which "
                    "`tower replay` reads back.")
    add_run_arguments(e)
    e.add_argument("-o", "--output", help="file or folder to write (default: RUN.json, or "
                                              "RUN@RUN_ID.json with --run-id)")
    e.set_defaults(handler=export)

    r = sub.add_parser(
        "replay", help="replay histories against the current code",
        description="Replay history files (or every *.json in folders) against the current "
                    "agents with the worker's sandbox and converter, then check each run's "
                    "transition log: steps strictly increase, only declared moves, DONE is "
                    "never left, FAILED is left only by an operator, and the path is the one "
                    "the original run recorded. Exits 1 if any history fails.")
    r.add_argument("paths", nargs="+", metavar="PATH", help="history JSON file or folder")
    r.add_argument("-v", "--verbose", action="store_true", help="print every transition")
    r.add_argument("--namespace",
                   help="the namespace the runs were recorded in; workflow code may read it "
                        "(default: the tenant, TEMPORAL_NAMESPACE, else 'default')")
    r.add_argument("--workflows", metavar="MODULE:NAME",
                   help="replay against these workflow classes (a class, or a list or dict of "
                        "them) instead of Tower's registered agents")
    r.set_defaults(handler=replay_cmd)


async def fetch(client: Client, run: str, run_id: str | None = None) -> WorkflowHistory:
    """A run's history; a clear error when the server does not know the run."""
    handle = client.get_workflow_handle(run, run_id=run_id)
    try:
        return await handle.fetch_history()
    except RPCError as exc:
        if exc.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
            raise CliError(f"run {run!r}{f' ({run_id})' if run_id else ''} not found: "
                           f"{exc.message}") from None
        raise


async def export(args: argparse.Namespace) -> int:
    client = await connect()
    history = await fetch(client, args.run, args.run_id)
    # The name carries the workflow id, which replay needs; a chosen run gets its id too.
    name = f"{args.run}@{args.run_id}.json" if args.run_id else f"{args.run}.json"
    out = Path(args.output or name)
    if out.is_dir():
        out = out / name
    out.write_text(history.to_json())
    print(f"wrote {len(history.events)} events of {args.run} to {out}")
    return 0


async def replay_cmd(args: argparse.Namespace) -> int:
    try:
        histories = load(args.paths)
    except HistoryError as exc:
        raise CliError(str(exc)) from None
    workflows = import_workflows(args.workflows) if args.workflows else None
    namespace = args.namespace or connect_config().get("namespace") or "default"
    results = await replay(histories, workflows=workflows, namespace=namespace)
    for result in results:
        print(report(result, verbose=args.verbose))
    bad = [r for r in results if not r.ok]
    print(f"{len(results)} histories replayed: {len(results) - len(bad)} ok, {len(bad)} failed")
    return 1 if bad else 0


def import_workflows(spec: str) -> list[type]:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise CliError(f"--workflows wants MODULE:NAME, got {spec!r}")
    try:
        found = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise CliError(f"--workflows {spec}: {exc}") from None
    classes = list(found.values() if isinstance(found, dict) else
                   found if isinstance(found, list | tuple) else [found])
    if not classes or not all(isinstance(c, type) for c in classes):
        raise CliError(f"--workflows {spec}: not a workflow class or a list/dict of them")
    return classes


def report(result: Replayed, *, verbose: bool = False) -> str:
    last = result.log[-1] if result.log else None
    where = f"{len(result.log)} steps, at {last.target}" if last else "no steps"
    lines = [f"{'ok  ' if result.ok else 'FAIL'}  {result.source}  workflow "
             f"{result.workflow_type} (id {result.workflow_id}): {where}"]
    if result.failure:
        sep = " " if result.failure.startswith("at event") else ": "
        lines.append(f"      replay failed{sep}{result.failure}")
    lines += [f"      {problem}" for problem in result.problems]
    if verbose:
        lines += [f"      step {t.step:>3}  {t.source} -> {t.target}  ({t.reason})"
                  for t in result.log]
    return "\n".join(lines)

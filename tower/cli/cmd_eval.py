"""`tower eval HISTORIES...`: what the project's current code does to recorded runs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click
from temporalio.client import WorkflowHistory

from tower.activities.stores import is_url, redact
from tower.cli import project
from tower.cli.agents import agents
from tower.cli.common import CliError, imported
from tower.cli.output import json_option, print_json
from tower.temporal.replay import load, workflow_type
from tower.testing.evals import BUILT_IN, Change, EvalReport, Mode, RunResult, Scorer, evaluate
from tower.testing.evals.compare import RANK

FRESH, LIVE = "fresh", "live"
FRESH_TOLD = "fresh (the tools' own seed, as before the recorded runs)"


@click.command("eval", help=(
    "Re-run recorded runs (history files or folders, or --query on a namespace) against the "
    "project's current code on a dev server of the eval's own, with the same input and the "
    "same decisions, messages and events, tools on fresh data of their own, and compare "
    "each with its baseline: final status and node, path of states, tool calls, gates and "
    "decisions, tokens, cost, latency. Each run is same, changed or regressed."))
@click.argument("paths", nargs=-1, metavar="[HISTORIES]...")
@click.option("--query", help="evaluate the runs this visibility query finds (read only)")
@click.option("--namespace", help="the namespace --query reads (default: the tenant's)")
@click.option("--models", "mode", type=click.Choice([m.value for m in Mode]),
              default=Mode.RECORDED.value, show_default=True,
              help="recorded: every model call answered from the recording; changed: live "
                   "only where a node's prompt or model changed; live: the candidate's model "
                   "(OPENAI_API_KEY, TOWER_MODELS; none: the scripted model)")
@click.option("--baseline", type=click.Path(file_okay=False, path_type=Path),
              help="compare with an earlier eval's --report folder (default: the recordings)")
@click.option("--fail-on", type=click.Choice(["regressed", "changed"]),
              help="exit 1 when any run is this (changed: or regressed)")
@click.option("--report", "report_dir", type=click.Path(file_okay=False, path_type=Path),
              help="write report.md, report.json and a graph picture per moved agent here")
@click.option("--data", default=FRESH, show_default=True, metavar="fresh|live|PATH",
              help="the tools' data each run starts from: fresh (the tools' own seed, as "
                   "before any run), live (a copy of TOWER_DB, else .tower/tools.sqlite, as "
                   "it is now, holding what the recorded runs did) or a copy of PATH")
@click.option("--timeout", type=float, default=120.0, show_default=True,
              help="seconds a run may take before it counts as stuck")
@click.option("--judge", is_flag=True, help="also ask the model judge (the project's model "
                                            "gateway) whether each changed answer got worse")
@click.option("--scorer", "scorers", multiple=True, metavar="MODULE:FUNCTION",
              help="a scorer of your own: f(baseline, candidate) -> Score | None")
@json_option("the report as JSON (progress goes to stderr)")
async def command(paths: tuple[str, ...], query: str | None, namespace: str | None, mode: str,
                  baseline: Path | None, fail_on: str | None, report_dir: Path | None,
                  data: str, timeout: float, judge: bool, scorers: tuple[str, ...],
                  as_json: bool) -> int:
    from tower.activities.model import ModelSettings
    from tower.temporal.plugin import WorkerMisconfigured
    from tower.testing.evals import candidate_worker
    from tower.testing.evals import report as reports

    if not paths and not query:
        raise CliError("name history files or folders, or --query to read runs from a server")
    folder = project.root()
    tools_db = _data(data, folder)  # before anything is read: a bad --data changes nothing
    histories = (load(list(paths)) if paths else []) + (
        await _query(query, namespace) if query else [])
    if not histories:
        raise CliError(f"--query {query!r} found no runs")
    baseline_report = reports.load_baseline(baseline) if baseline is not None else None
    scoring: list[Scorer] = list(BUILT_IN) + [_import(spec) for spec in scorers]
    settings = ModelSettings.from_env()
    if judge:
        from tower.testing.evals.compare import gateway_judge

        scoring.append(gateway_judge(settings))
    # The project's agents, their tools bound as its worker.py binds them (tower new's has it).
    bindings = getattr(project.module("worker"), "bindings", None)
    build_worker = candidate_worker(list(agents().values()), bindings)
    machines = {name: cls.machine for name, cls in agents().items() if hasattr(cls, "machine")}
    types = {source: workflow_type(history) for source, history in histories}
    unknown = sorted({f"{source} ({kind})" for source, kind in types.items()
                      if kind not in agents()})
    if unknown:  # its run would wait forever for a worker that has no such workflow
        raise CliError(f"not a run of this project's agents ({', '.join(sorted(agents()))}): "
                       + ", ".join(unknown))
    print(f"eval: {len(histories)} histories, models {mode} ({settings.describe()}), "
          f"baseline {baseline or 'the recordings'}, data {tools_db or FRESH_TOLD}",
          file=sys.stderr, flush=True)
    try:
        report = await evaluate(
            # The live data is hashed before and after even when it is not copied.
            histories, build_worker, mode=Mode(mode), data=tools_db, watch=_live(folder),
            baseline=baseline_report, baseline_name=str(baseline or "recorded"),
            scorers=scoring, timeout=timeout, progress=_progress, models=settings)
    except WorkerMisconfigured as exc:  # a tool's resource worker.py did not give the eval
        raise CliError(f"{exc}. tower eval binds them with worker.py's bindings(db_path), "
                       "called with the eval's own database (docs/evals.md)") from None
    if report_dir is not None:
        from tower.core.pictures import machine_svg

        drawings = {agent: machine_svg(machines[agent], None, moves)
                    for agent, moves in report.moved().items() if agent in machines}
        written = reports.write(report, report_dir, drawings)
        print(f"report: {', '.join(str(p) for p in written)}", file=sys.stderr)
    if as_json:
        print_json(reports.to_json(report))
    else:
        print(_totals(report))
    if not report.data_untouched:
        print("error: the real data changed during the eval", file=sys.stderr)
        return 1
    return 1 if fail_on and RANK[report.worst] >= RANK[Change(fail_on)] else 0


async def _query(query: str, namespace: str | None) -> list[tuple[str, WorkflowHistory]]:
    """The runs ``query`` finds, each run's history read (list and fetch only: the eval
    never starts, signals or changes anything on this server)."""
    from tower.client import connect, use_tenant

    if namespace:
        use_tenant(namespace)
    client = await connect()
    found = []
    async for run in client.list_workflows(query):
        history = await client.get_workflow_handle(run.id, run_id=run.run_id).fetch_history()
        found.append((f"{client.namespace}/{run.id}@{run.run_id}", history))
    return found


def _data(choice: str, folder: Path) -> Path | None:
    """The tools' database the eval copies: None for fresh data (the project's worker
    seeds the eval's own database, as it seeds a new deployment's)."""
    if choice == FRESH:
        return None
    if choice == LIVE:
        given = os.environ.get("TOWER_DB", "")
        if is_url(given):  # an eval copies a file; it never writes to a shared database
            raise CliError(f"--data live copies a SQLite tools' database, but TOWER_DB is "
                           f"PostgreSQL ({redact(given)}); use --data fresh or --data FILE")
        path = _live(folder)
        if not path.is_file():
            raise CliError(f"--data live: no tools' database at {path} (TOWER_DB, else "
                           ".tower/tools.sqlite); --data fresh starts from the tools' own seed")
        return path
    path = Path(choice)
    if not path.is_file():
        raise CliError(f"--data {choice}: not a file (fresh, live or a tools' database)")
    return path


def _live(folder: Path) -> Path:
    """Where the project's worker keeps the tools' data (worker.py's default)."""
    given = os.environ.get("TOWER_DB")
    return Path(given) if given else folder / ".tower" / "tools.sqlite"


def _import(spec: str) -> Scorer:
    found = imported("--scorer", spec)
    if not callable(found):
        raise CliError(f"--scorer {spec}: not a function")
    return found


def _progress(i: int, n: int, r: RunResult) -> None:
    why = "; ".join(f"{s.scorer}: {s.detail}" for s in r.scores)
    print(f"[{i}/{n}] {r.workflow_id} ({r.agent}): {r.verdict.value}"
          f"{f' - {why}' if why else ''}", file=sys.stderr, flush=True)


def _totals(report: EvalReport) -> str:
    c, t = report.counts, report.totals()
    lines = [f"{len(report.runs)} runs: {c['same']} same, {c['changed']} changed, "
             f"{c['regressed']} regressed"]
    for key in ("tokens", "cost_usd", "latency_s"):
        lines.append(f"  {key}: {t['baseline'][key]} -> {t['candidate'][key]}")
    for agent, moves in report.moved().items():
        lines.append(f"  {agent} moves: " + ", ".join(
            f"{a}->{b} {n:+d}" for (a, b), n in sorted(moves.items())))
    if report.data_checked:
        lines.append(f"  real data {'unchanged' if report.data_untouched else 'CHANGED'}: "
                     + ", ".join(report.data_checked))
    return "\n".join(lines)

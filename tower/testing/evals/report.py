"""An eval's report, for people (Markdown, a picture per agent whose traffic moved) and for
CI (JSON, which a later eval reads back as its ``--baseline``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tower.testing.evals import EvalReport, RunResult
from tower.testing.evals.recording import EvalError, RunSummary

REPORT_JSON = "report.json"


def to_json(report: EvalReport) -> dict[str, Any]:
    data = report.model_dump(mode="json")
    data["counts"], data["worst"], data["totals"] = (report.counts, report.worst.value,
                                                     report.totals())
    data["moved"] = {agent: {f"{a}->{b}": n for (a, b), n in moves.items()}
                     for agent, moves in report.moved().items()}
    return data


def load_baseline(folder: Path) -> dict[str, RunSummary]:
    """The candidate runs of an earlier eval (its ``report.json``), by workflow id."""
    path = folder / REPORT_JSON
    try:
        data = json.loads(path.read_text())
        return {r["workflow_id"]: RunSummary.model_validate(r["candidate"])
                for r in data["runs"]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise EvalError(f"{path}: not an eval report ({exc})") from None


def write(report: EvalReport, folder: Path, drawings: Mapping[str, str] | None = None
          ) -> list[Path]:
    """report.json, report.md and ``graph-AGENT.svg`` for each of ``drawings`` (agent ->
    SVG markup of its graph with the moved edges highlighted: ``tower eval`` draws them)."""
    folder.mkdir(parents=True, exist_ok=True)
    written = [folder / REPORT_JSON, folder / "report.md"]
    written[0].write_text(json.dumps(to_json(report), indent=2) + "\n")
    pictures: dict[str, str] = {}
    for agent, svg in (drawings or {}).items():
        path = folder / f"graph-{agent}.svg"
        path.write_text(svg + "\n")
        pictures[agent] = path.name
        written.append(path)
    written[1].write_text(markdown(report, pictures))
    return written


def markdown(report: EvalReport, pictures: Mapping[str, str] | None = None) -> str:
    counts = report.counts
    lines = [f"# Eval: {len(report.runs)} runs, models {report.mode.value}, baseline "
             f"{report.baseline}", "",
             f"**{counts['same']} same · {counts['changed']} changed · "
             f"{counts['regressed']} regressed**", "",
             "| run | agent | verdict | status | path | tokens | cost | why |",
             "|---|---|---|---|---|---|---|---|"]
    for r in report.runs:
        b, c = r.baseline, r.candidate
        status = b.status if b.status == c.status else f"{b.status} → {c.status}"
        path = " › ".join(c.trail) if b.trail == c.trail else (
            f"{' › '.join(b.trail)} ⇒ {' › '.join(c.trail)}")
        why = "; ".join(f"{s.scorer}: {s.detail}" for s in r.scores) or "-"
        lines.append(f"| `{r.workflow_id}` | {r.agent} | **{r.verdict.value}** | {status} | "
                     f"{_cell(path)} | {b.tokens} → {c.tokens} | ${b.cost_usd:.4f} → "
                     f"${c.cost_usd:.4f} | {_cell(why)} |")
    totals = report.totals()
    lines += ["", "## Totals", "", "| | baseline | candidate |", "|---|---|---|"]
    for key in totals["baseline"]:
        lines.append(f"| {key} | {totals['baseline'][key]} | {totals['candidate'][key]} |")
    moved = report.moved()
    if moved:
        lines += ["", "## Moves whose traffic changed", ""]
        for agent, moves in moved.items():
            shown = ", ".join(f"{a} → {b} {n:+d}" for (a, b), n in sorted(moves.items()))
            lines.append(f"- **{agent}**: {shown}")
            if pictures and agent in pictures:
                lines += ["", f"![{agent}]({pictures[agent]})", ""]
    lines += ["", "## Runs that did not stay the same", ""]
    lines += [_detail(r) for r in report.runs if r.scores] or ["none"]
    data = ("fresh tools' data (the tools' own seed)" if report.data == "fresh" else
            f"a private copy of `{report.data}`")
    lines += ["", "## Isolation", "",
              f"The eval ran on its own dev server and trust directory; each run started from "
              f"{data}."]
    if report.data_checked:
        state = "unchanged" if report.data_untouched else "CHANGED"
        lines.append(f"Real data checked before and after, {state}: "
                     + ", ".join(f"`{f}`" for f in report.data_checked))
    return "\n".join(lines) + "\n"


def _detail(r: RunResult) -> str:
    out = [f"### `{r.workflow_id}` ({r.agent}): {r.verdict.value}", ""]
    out += [f"- {s.scorer} ({s.verdict.value}): {s.detail}" for s in r.scores]
    out += [f"- note: {n}" for n in r.notes]
    answered = ", ".join(f"{k} {v}" for k, v in r.answered.items())
    if answered:
        out.append(f"- model calls: {answered}")
    return "\n".join(out) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:300]

"""Format the benchmark's figures as the table docs/benchmarks.md shows."""

from __future__ import annotations

from typing import Any

# The server's defaults: history warnings at 10,240 events or 10 MiB per run.
WARN_EVENTS, WARN_BYTES = 10_240, 10 * 1024 * 1024
SECTIONS = ("overhead", "growth", "throughput", "replay", "memory")
# measure, Tower, compared with, ratio, target, met
Row = tuple[str, str, str, str, str, str]


def _ok(met: bool) -> str:
    return "yes" if met else "**no**"


def table(f: dict[str, Any]) -> str:
    rows: list[Row] = [("measure", "Tower", "compared with", "ratio", "target", "met")]
    failed = [(name, f[name]["error"]) for name in SECTIONS
              if "error" in f.get(name, {"error": "not run"})]
    if failed:  # show what did run; say what did not
        rows += [(f"{name}: FAILED ({why})", "", "", "", "", "**no**") for name, why in failed]
        return _render(rows, [])
    o, g, t, r, m = f["overhead"], f["growth"], f["throughput"], f["replay"], f["memory"]
    tw, base, every = o["tower"], o["baseline"], o["tower_every_step"]

    def add(name: str, ours: float, theirs: float | None, fmt: str, target: str,
            met: bool | None) -> None:
        ratio = f"{ours / theirs:.2f}×" if theirs else ""
        rows.append((name, format(ours, fmt), "" if theirs is None else format(theirs, fmt),
                     ratio, target, "" if met is None else _ok(met)))

    wall = tw["wall_ms"] / base["wall_ms"]
    add("wall time, 10-step run (median ms) vs hand-written", tw["wall_ms"], base["wall_ms"],
        ".1f", "≤ 1.10×", wall <= 1.10)
    add("history events per transition vs hand-written", tw["events_per_step"],
        base["events_per_step"], ".1f", "≤ 1.00×",
        tw["events_per_step"] <= base["events_per_step"])
    add("  … with search attributes upserted every step", every["events_per_step"],
        base["events_per_step"], ".1f", "", None)
    add("history bytes per transition vs hand-written", tw["bytes_per_step"],
        base["bytes_per_step"], ".0f", "", None)
    per, naive = g["per_call"], g["naive_per_call"]
    for mark, value in per.items():
        add(f"history bytes per model call, turn {mark} vs naive", value, naive.get(mark),
            ".0f", "", None)
    if 10 in per and max(per) > 10:
        last = max(per)
        add(f"  turn {last} vs turn 10 (Tower)", per[last], per[10], ".0f", "≤ 1.20×",
            per[last] <= 1.2 * per[10])
    add(f"total history bytes after {g['naive_turns']} turns vs naive", g["total_at_same"],
        g["naive_total"], ".0f", "", None)
    add(f"{g['turns']}-turn thread: runs (continue-as-new)", g["runs"], None, "d", "", None)
    add("  largest run: events", g["max_run_events"], WARN_EVENTS, "d", "< warning",
        g["max_run_events"] < WARN_EVENTS)
    add("  largest run: bytes", g["max_run_bytes"], WARN_BYTES, "d", "< warning",
        g["max_run_bytes"] < WARN_BYTES)
    tp = t["tower"]["transitions_per_s"] / t["baseline"]["transitions_per_s"]
    add(f"throughput, {f['args']['concurrent']} concurrent runs × 10 (steps/s)",
        t["tower"]["transitions_per_s"], t["baseline"]["transitions_per_s"], ".0f", "≥ 0.90×",
        tp >= 0.9)
    if "cpu_ms_per_step" in t["tower"]:
        add("  worker+client CPU ms per step (not moved by other load)",
            t["tower"]["cpu_ms_per_step"], t["baseline"]["cpu_ms_per_step"], ".1f", "", None)
    add(f"replay (transitions/s, {r['histories']} histories, {r['failures']} failures)",
        r["transitions_per_s"], None, ".0f", "", r["failures"] == 0)
    add(f"worker peak RSS, {m['parked']}/{m['runs']} runs parked at a gate, "
        f"cache {m.get('cache', 1000)} (MB)",
        m["peak_mb"], m["idle_mb"], ".0f", "< 300 MB", m["peak_mb"] < 300)
    notes = [f"chat: {g['turns_per_s']:.1f} turns/s; naive thread: "
             f"{g['naive_stopped'] or 'completed'}",
             "compared-with column: hand-written workflow / naive thread / idle worker RSS"]
    return _render(rows, notes)


def _render(rows: list[Row], notes: list[str]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(6)]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
             for row in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines + [""] + notes)

"""Format the benchmark's figures as the table docs/benchmarks.md shows."""

from __future__ import annotations

from typing import Any

# The server's defaults: history warnings at 10,240 events or 10 MiB per run.
WARN_EVENTS, WARN_BYTES = 10_240, 10 * 1024 * 1024
SECTIONS = ("overhead", "chat", "pair", "carry", "throughput", "replay", "memory")
# (cleanup, streaming and eval: shown, or their failure, when they ran)
# measure, Tower, compared with, ratio, target, met
Row = tuple[str, str, str, str, str, str]
TURN_BYTES = 2500  # a 400-character chat turn's history (issue 32: the reply once)
REPLAY = 0.80  # a 300-turn thread's replay vs the hand-written one's (issue 41)


def _ok(met: bool) -> str:
    return "yes" if met else "**no**"


def table(f: dict[str, Any]) -> str:
    rows: list[Row] = [("measure", "Tower", "compared with", "ratio", "target", "met")]
    failed = [(name, f[name]["error"]) for name in SECTIONS
              if "error" in f.get(name, {"error": "not run"})]
    if failed:  # show what did run; say what did not
        rows += [(f"{name}: FAILED ({why})", "", "", "", "", "**no**") for name, why in failed]
        return _render(rows, [])
    o, c, p, carry = f["overhead"], f["chat"], f["pair"], f["carry"]
    t, r, m = f["throughput"], f["replay"], f["memory"]
    tw, base, every = o["tower"], o["baseline"], o["tower_every_step"]

    def add(name: str, ours: float, theirs: float | None, fmt: str, target: str,
            met: bool | None) -> None:
        ratio = f"{ours / theirs:.2f}×" if theirs else ""
        rows.append((name, format(ours, fmt), "" if theirs is None else format(theirs, fmt),
                     ratio, target, "" if met is None else _ok(met)))

    naive_turn_events = p["events"]["naive"] / p["turns"]
    add(f"history bytes per chat turn, 400-char messages and replies ({c['turns']} turns)",
        c["bytes_per_turn"], p["bytes"]["naive"] / p["turns"], ".0f", f"≤ {TURN_BYTES}",
        c["bytes_per_turn"] <= TURN_BYTES)
    add("events per chat turn vs hand-written one-activity turn", c["events_per_turn"],
        naive_turn_events, ".1f", "≤ 1.00×", c["events_per_turn"] <= naive_turn_events)
    growth = c["bytes_at_end"] / c["bytes_at_10"]
    add(f"bytes per turn, turn {c['turns']} vs turn 10 (median of 10)", c["bytes_at_end"],
        c["bytes_at_10"], ".0f", "≤ 1.05×", growth <= 1.05)
    if "bytes_at_100" in c and c["turns"] > 100:
        add(f"  turn {c['turns']} vs turn 100 (median of 10)", c["bytes_at_end"],
            c["bytes_at_100"], ".0f", "≤ 1.05×", c["bytes_at_end"] <= 1.05 * c["bytes_at_100"])
    replay = p["replay_s"]["tower"] / p["replay_s"]["naive"]
    add(f"replay of a {p['turns']}-turn thread vs hand-written (median CPU s)",
        p["replay_s"]["tower"], p["replay_s"]["naive"], ".2f", f"≤ {REPLAY:.2f}×",
        replay <= REPLAY)
    rows.append((f"replay of a continued thread ({carry['runs']} runs), payload store deleted",
                 "passes" if not carry["failed"] else f"fails: {carry['failed'][0][:60]}",
                 "", "", "passes", _ok(not carry["failed"])))
    add(f"  largest carried input (bytes; store threshold {carry['threshold']})",
        carry["largest_carried"], None, "d", "", None)
    latency = p["latency_ms"]["tower"] / p["latency_ms"]["naive"]
    add(f"chat turn latency, median ms of turns 1-{p['latency_turns']} vs hand-written",
        p["latency_ms"]["tower"], p["latency_ms"]["naive"], ".1f", "≤ 1.00×", latency <= 1.0)
    add(f"  … median of all {p['turns']} turns", p["latency_all_ms"]["tower"],
        p["latency_all_ms"]["naive"], ".1f", "", None)
    add("history events per transition vs hand-written 10-step", tw["events_per_step"],
        base["events_per_step"], ".1f", "≤ 1.00×",
        tw["events_per_step"] <= base["events_per_step"])
    add("  … with search attributes upserted every step", every["events_per_step"],
        base["events_per_step"], ".1f", "", None)
    add("history bytes per transition vs hand-written", tw["bytes_per_step"],
        base["bytes_per_step"], ".0f", "", None)
    wall = tw["wall_ms"] / base["wall_ms"]
    add("wall time, 10-step run (median ms) vs hand-written", tw["wall_ms"], base["wall_ms"],
        ".1f", "≤ 1.10×", wall <= 1.10)
    add(f"{c['turns']}-turn thread: largest run, events", c["max_run_events"], WARN_EVENTS,
        "d", "< warning", c["max_run_events"] < WARN_EVENTS)
    add("  largest run: bytes", c["max_run_bytes"], WARN_BYTES, "d", "< warning",
        c["max_run_bytes"] < WARN_BYTES)
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
        m["peak_mb"], m["idle_mb"], ".0f", "< 300 MB",
        m["peak_mb"] < 300 and m["parked"] >= m["runs"])  # every run parked, or not met
    if "runs_per_s" in m:
        add("  runs started and parked per second", m["runs_per_s"], None, ".1f", "", None)
    if "decision_p95_s" in m:
        add(f"  decision on an evicted run → next step, p95 of {m['decisions']} (s)",
            m["decision_p95_s"], None, ".2f", "< 1 s", m["decision_p95_s"] < 1.0)
    e = f.get("eval", {"error": "not run"})
    if "error" in e:
        rows.append((f"eval of recorded runs: FAILED ({e['error']})", "", "", "", "", "**no**"))
    else:
        add(f"eval per recorded run, recorded models ({e['runs']} runs, s) vs replay",
            e["per_run_s"], e["replay_per_run_s"], ".3f", "",
            e["counts"]["same"] == e["runs"])
        add("  eval set-up: its own dev server, trust, data copy, worker (s)", e["setup_s"],
            None, ".2f", "", None)
    if "cleanup" in f:
        _cleanup_rows(f["cleanup"], add, rows)
    if "streaming" in f:
        _streaming_rows(f["streaming"], add, rows, f.get("workflow_streams"))
    notes = [f"chat: {c['turns_per_s']:.1f} turns/s, {c['runs']} runs (continue-as-new); "
             f"hand-written {p['turns']}-turn history: {p['events']['naive']} events, "
             f"{p['bytes']['naive']} bytes (Tower: {p['events']['tower']}, "
             f"{p['bytes']['tower']})",
             "compared-with column: hand-written workflow or chat / server warning / "
             "idle worker RSS"]
    return _render(rows, notes)


def replay_table(r: dict[str, Any]) -> str:
    """``python -m bench replay``'s figures: the pair's replay alone."""
    rows: list[Row] = [("measure", "Tower", "compared with", "ratio", "target", "met")]
    s, ratio = r["replay_s"], r["replay_s"]["tower"] / r["replay_s"]["naive"]
    rows.append((f"replay of a {r['turns']}-turn thread vs hand-written (median CPU s of "
                 f"{r['rounds']} alternating rounds)", f"{s['tower']:.3f}", f"{s['naive']:.3f}",
                 f"{ratio:.2f}×", f"≤ {REPLAY:.2f}×", _ok(ratio <= REPLAY)))
    same = s["naive_tower_sandbox"]
    rows.append(("  … the hand-written one in Tower's sandbox", "", f"{same:.3f}",
                 f"{s['tower'] / same:.2f}×", "", ""))
    rows.append(("  reading the history from JSON (CPU s, not in the replay)",
                 f"{r['load_s']['tower']:.3f}", f"{r['load_s']['naive']:.3f}", "", "", ""))
    rows.append(("  events; bytes", f"{r['events']['tower']}; {r['bytes']['tower']}",
                 f"{r['events']['naive']}; {r['bytes']['naive']}", "", "", ""))
    each = "; ".join(f"{k}: " + " ".join(f"{v:.2f}" for v in vs)
                     for k, vs in r["replays_s"].items())
    before, after = r["load_average"]
    return _render(rows, [f"each round (CPU s): {each}",
                          f"load average before {before[0]:.1f}, after {after[0]:.1f} "
                          f"(histories: {r['histories']})"])


def _cleanup_rows(k: dict[str, Any], add: Any, rows: list[Row]) -> None:
    """bench.cleanup's figures: one retention pass over closed threads, then a second."""
    if "error" in k:
        rows.append((f"retention cleanup: FAILED ({k['error']})", "", "", "", "", "**no**"))
        return
    gone = k["rows_removed_per_run"]
    kept = k["open_run_answered"] and set(k["second_pass_removed"].values()) == {0}
    add(f"retention cleanup, ms per closed run ({k['runs']} closed {k['turns']}-turn threads"
        ", one open) vs a second pass's ms in all", k["ms_per_run"], k["second_pass_ms"],
        ".1f", "", kept)
    add(f"  rows removed per closed run: {gone['messages']:.1f} messages, "
        f"{gone['windows']:.1f} windows, {gone['owners']:.1f} owners; stream events",
        gone["stream_events"], None, ".1f", "", None)


def _streaming_rows(s: dict[str, Any], add: Any, rows: list[Row],
                    ws: dict[str, Any] | None = None) -> None:
    """bench.streaming's figures (a suite of its own: shown when it ran), and the
    alternative's, bench.workflow_streams, when it ran too."""
    if "error" in s:
        rows.append((f"streaming: FAILED ({s['error']})", "", "", "", "", "**no**"))
        return
    pace = f"{s['reply_chars']}-char replies at {s['tokens_per_second']:g} tokens/s"
    add(f"time to first token at the client, streamed vs whole reply unstreamed ({pace}, "
        "median ms)", s["first_token_ms"], s["whole_reply_ms"], ".0f", "", None)
    add("first token at the client after the model emitted it, p95 ms",
        s["lag_p95_ms"], None, ".0f", "≤ 150 ms", s["lag_p95_ms"] <= 150)
    b, e = s["bytes_per_turn"], s["events_per_turn"]
    add("history bytes per chat turn, streaming on vs off", b["on"], b["off"], ".0f",
        "≤ 1.10×", b["on"] <= 1.10 * b["off"])
    add("history events per chat turn, streaming on vs off", e["on"], e["off"], ".1f",
        "≤ 1.00×", e["on"] <= e["off"])
    add("  stream events per chat turn (side channel, not in the history)",
        s["stream_events_per_turn"], None, ".0f", "", None)
    if ws and "error" not in ws:
        wb, we = ws["bytes_per_turn"], ws["events_per_turn"]
        add(f"  Workflow Streams ({ws['batch_ms']:.0f} ms batches): history bytes per turn, "
            "on vs off", wb["on"], wb["off"], ".0f", "", None)
        add("  Workflow Streams: history events per turn, on vs off", we["on"], we["off"],
            ".0f", "", None)
        add("  Workflow Streams: first token at the client (median ms)",
            ws["first_token_ms"], None, ".0f", "", None)


def _render(rows: list[Row], notes: list[str]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(6)]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
             for row in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines + [""] + notes)

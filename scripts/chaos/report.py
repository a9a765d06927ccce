#!/usr/bin/env python3
"""Turns the chaos suite's results.jsonl into the RELIABILITY.md table.

  report.py RESULTS.jsonl [--md OUT.md] [--reliability RELIABILITY.md]

One row per (scenario, server): counts are summed over the runs (any non-zero is a finding),
the longest publish gap is the median of the runs' longest gaps (max in brackets), time to
healthy is the median of every heal of every run (max in brackets; ">60" = not healthy within
the 60 s limit). With --reliability, the rows between the chaos-table markers are replaced for
the (scenario, server) pairs in RESULTS and kept for the others, so a filtered run
(CHAOS_SCENARIOS / CHAOS_SERVER) updates only its own rows.
"""

import argparse
import json
import re
import statistics
import sys

BEGIN = "<!-- chaos-table:begin -->"
END = "<!-- chaos-table:end -->"
HEADER = ("| scenario | server | runs | acked | lost | dup | unexp/reord | divergent nodes "
          "| WQ acked / lost | KV ops | lin. violations | stale reads | longest gap s "
          "| healthy after s | SIGTERM exit s | log MB | measured | notes |")
SEP = "|" + "---|" * HEADER.count(" | ") + "---|"
SCENARIO_ORDER = ["kill-random", "kill-leader", "kill-two", "stop-leader", "isolate-leader",
                  "isolate-follower", "split-churn", "bridge-leader", "lost-volume",
                  "rolling-restart", "corrupt-sst", "corrupt-wal", "corrupt-manifest",
                  "corrupt-during-rebuild-2s", "corrupt-during-rebuild-6s"]
SERVER_ORDER = ["jetraft", "nats", "nats-sync"]


def fmt(x, nd=1):
    return "-" if x is None else f"{x:.{nd}f}"


def med_max(vals, limit_text=">60"):
    if not vals:
        return "-"
    if any(v is None for v in vals):
        known = [v for v in vals if v is not None]
        bad = len(vals) - len(known)
        m = f"{statistics.median(known):.1f}" if known else ""
        return f"{m} ({bad}× {limit_text})".strip()
    m = statistics.median(vals)
    return f"{m:.1f} (max {max(vals):.1f})" if len(vals) > 1 else f"{m:.1f}"


def row(scenario, server, runs):
    ok = [r for r in runs if r.get("ok")]
    notes = []
    for r in runs:
        if not r.get("ok"):
            notes.append(f"run {r['run'] + 1} failed: {r.get('error', '?')[:120]}")
        elif not r.get("healthy_at_end", True):
            notes.append(f"run {r['run'] + 1}: not healthy at the end")
        notes.extend(r.get("notes") or [])
        if r.get("read_errors"):
            notes.append(f"{r['read_errors']} unreadable seqs")
        if r.get("kv_divergent"):
            notes.append(f"KV stream divergent on {','.join(r['kv_divergent'])}")
        if r.get("lin_sample"):
            notes.append("e.g. " + r["lin_sample"][0])
    s = lambda k: sum(r.get(k, 0) or 0 for r in ok)  # noqa: E731
    div = sorted({n for r in ok for n in (r.get("divergent") or {})}
                 | {n for r in ok for n in (r.get("kv_divergent") or {})})
    gaps = [r["gap"] for r in ok if r.get("gap") is not None]
    gap = "-" if not gaps else (f"{statistics.median(gaps):.1f}" +
                                (f" (max {max(gaps):.1f})" if len(gaps) > 1 else ""))
    heals = [h for r in ok for h in (r.get("heals") or [])]
    shut = [h for r in ok for h in (r.get("shutdowns") or [])]
    acked = [r.get("acked", 0) for r in ok]
    cells = [
        scenario, server, f"{len(ok)}/{len(runs)}",
        str(int(statistics.median(acked))) if acked else "-",
        str(s("lost")), str(s("duplicates")),
        f"{s('unexpected')}/{s('reordered')}",
        (f"{len(div)} ({','.join(div)})" if div else "0"),
        f"{s('wq_acked')} / {s('wq_lost')}", str(s("kv_ops")), str(s("lin_violations")),
        str(s("stale_reads")), gap, med_max(heals),
        (f"{statistics.median(shut):.1f} (max {max(shut):.1f})" if shut else "-"),
        f"{statistics.median([r.get('log_mb', 0) for r in runs]):.0f}",
        max((r.get("date", "") for r in runs), default=""),
        "; ".join(dict.fromkeys(notes))[:300] or "",
    ]
    return "| " + " | ".join(c.replace("|", "/") for c in cells) + " |"


def key_of(line):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    return (cells[0], cells[1]) if len(cells) > 2 else None


def order(k):
    sc, sv = k
    return (SCENARIO_ORDER.index(sc) if sc in SCENARIO_ORDER else 99, sc,
            SERVER_ORDER.index(sv) if sv in SERVER_ORDER else 9)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--md")
    ap.add_argument("--reliability")
    a = ap.parse_args()
    groups = {}
    with open(a.results) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                groups.setdefault((r["scenario"], r["server"]), []).append(r)
    rows = {k: row(*k, v) for k, v in groups.items()}
    table = "\n".join([HEADER, SEP] + [rows[k] for k in sorted(rows, key=order)])
    print(table)
    if a.md:
        with open(a.md, "w") as f:
            f.write(table + "\n")
    if a.reliability:
        text = open(a.reliability).read()
        m = re.search(re.escape(BEGIN) + r"\n(.*?)" + re.escape(END), text, re.S)
        if not m:
            sys.exit(f"{a.reliability}: no {BEGIN} ... {END} markers")
        old = {}
        for line in m.group(1).splitlines():
            k = key_of(line)
            if k and line.startswith("| ") and k != ("scenario", "server"):
                old[k] = line
        old.update(rows)
        new = "\n".join([HEADER, SEP] + [old[k] for k in sorted(old, key=order)])
        text = text[:m.start(1)] + new + "\n" + text[m.end(1):]
        with open(a.reliability, "w") as f:
            f.write(text)
        print(f"updated {a.reliability}", file=sys.stderr)


if __name__ == "__main__":
    main()

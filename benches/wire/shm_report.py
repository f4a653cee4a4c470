#!/usr/bin/env python3
"""REPORT.md for benches/wire/shm_vs_heap.sh: the broker with and without its store directory on
workloads (a) and (b), medians of the repetitions and the shm/heap ratio of each figure, then
the recovery times. Usage: shm_report.py OUT_DIR"""

import glob
import json
import os
import statistics
import sys

FIGURES = [
    ("send p50 (µs)", lambda d: d["send_rtt"]["p50"], "lower"),
    ("send p99 (µs)", lambda d: d["send_rtt"]["p99"], "lower"),
    ("e2e p50 (µs)", lambda d: d["e2e"]["p50"], "lower"),
    ("e2e p99 (µs)", lambda d: d["e2e"]["p99"], "lower"),
    ("sent/s", lambda d: d["sent_per_s"], "higher"),
    ("broker CPU µs/msg", lambda d: d["broker"]["cpu_us_per_msg"], "lower"),
    ("broker RSS after (KiB)", lambda d: d["broker"]["rss_after_kb"], "lower"),
    ("broker RSS idle (KiB)", lambda d: d["broker"]["rss_idle_kb"], "lower"),
]


def medians(a_runs, b_runs):
    """(label, median over a_runs, median over b_runs, which way is better) of each figure of
    FIGURES both sets of runs have."""
    rows = []
    for label, get, better in FIGURES:
        try:
            a = statistics.median(get(d) for d in a_runs)
            b = statistics.median(get(d) for d in b_runs)
        except (KeyError, TypeError):
            continue
        rows.append((label, a, b, better))
    return rows


def main(out):
    runs = {}
    for path in sorted(glob.glob(os.path.join(out, "raw", "*.json"))):
        name = os.path.basename(path)[: -len(".json")]
        workload, mode, _rep = name.split("-")
        with open(path) as f:
            runs.setdefault((workload, mode), []).append(json.load(f))
    lines = ["# The store directory's cost: shared memory vs heap (issue 26)", ""]
    meta = os.path.join(out, "meta.md")
    if os.path.exists(meta):
        lines += [open(meta).read().strip(), ""]
    lines += [
        "Same release broker, started fresh per run, with (`shm`: `--store-path-root-dir` on",
        "tmpfs) and without (`heap`) its store directory; runs alternate, medians of the",
        "repetitions; ratio = shm / heap (above 1.00 is a cost for latency and CPU, below 1.00",
        "for throughput). Raw driver, 128 B messages, 4 queues.",
        "",
    ]
    verdicts = []
    for workload in sorted({w for w, _ in runs}):
        heap, shm = runs.get((workload, "heap"), []), runs.get((workload, "shm"), [])
        if not heap or not shm:
            continue
        lines += [
            f"## Workload ({workload}): {len(heap)} heap and {len(shm)} shm runs",
            "",
            "| figure | heap | shm | shm/heap |",
            "|---|---:|---:|---:|",
        ]
        for label, h, s, better in medians(heap, shm):
            ratio = s / h if h else float("nan")
            lines.append(f"| {label} | {h:,.1f} | {s:,.1f} | {ratio:.3f} |")
            cost = ratio - 1 if better == "lower" else 1 - ratio
            if workload in ("a", "b") and "RSS" not in label:
                verdicts.append((workload, label, cost))
        lines.append("")
    if verdicts:
        worst = max(verdicts, key=lambda v: v[2])
        lines += [
            "The default rule (issue 26): the directory is on by default only if it costs at",
            "most 5 % on workloads (a) and (b) (latencies, throughput, broker CPU per message).",
            f"Largest cost there: workload ({worst[0]}) {worst[1]}: {worst[2] * 100:+.1f} %"
            f" ({'within' if worst[2] <= 0.05 else 'over'} 5 %).",
            "",
        ]
    dirs = os.path.join(out, "dir_kb.tsv")
    if os.path.exists(dirs):
        sizes = {}
        for l in open(dirs):
            if l.strip():
                cols = l.rstrip("\n").split("\t")
                # tag, idle kB, after kB (older runs: tag, after kB)
                idle_dir, after_dir = (cols[1], cols[2]) if len(cols) > 2 else ("0", cols[1])
                sizes[cols[0]] = (int(idle_dir or 0), int(after_dir or 0))
        drained = [(t, kb) for t, kb in sorted(sizes.items()) if t.startswith("d-")]
        if drained:
            lines += [
                "## After draining the backlog (workload d)",
                "",
                "RSS after the drain (and the settle time) against RSS idle before the run, and",
                "the same with the store directory's size added (its files are RAM too; their",
                "mapped pages are also in the RSS, so the sum counts them twice on both sides).",
                "",
                "| run | RSS idle | RSS after | RSS after / idle | directory idle | directory after | (RSS + directory) after / idle |",
                "|---|---:|---:|---:|---:|---:|---:|",
            ]
            for tag, (idle_dir, kb) in drained:
                for d in runs.get(("d", tag.split("-")[1]), []):
                    if f"{tag}.json" not in d.get("command", ""):
                        continue
                    b = d["broker"]
                    idle, after = b.get("rss_idle_kb") or 0, b.get("rss_after_kb") or 0
                    rss = after / idle if idle else float("nan")
                    both = (after + kb) / (idle + idle_dir) if idle else float("nan")
                    lines.append(
                        f"| {tag} | {idle:,} KiB | {after:,} KiB | {rss:.3f} | {idle_dir:,} KiB "
                        f"| {kb:,} KiB | {both:.3f} |"
                    )
            lines.append("")
    tsv = os.path.join(out, "recovery.tsv")
    if os.path.exists(tsv):
        rows = [l.rstrip("\n").split("\t") for l in open(tsv) if l.strip()]
        lines += [
            "## Recovery after SIGKILL",
            "",
            "A broker on the directory filled with N retained messages (no group; batches of",
            "64), killed with SIGKILL, started again: `restore` is the store's own time (from",
            "the start-up log), `first send` is from the process start (the exec) to the first",
            "answered SEND_MESSAGE_V2 of a minimal client (`first_send.py`) that connects as",
            "soon as the port accepts; RSS the restarted broker's (its mapped segments).",
            "",
            "| messages | size | retained | restored | restore | first send | RSS |",
            "|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in rows[1:]:
            count, size, retained, restored, restore_s, first_ms, rss = r
            try:
                restore = f"{float(restore_s) * 1000:,.0f} ms"
            except ValueError:
                restore = restore_s
            lines.append(
                f"| {int(count):,} | {size} B | {int(retained) / 2**20:,.0f} MiB | {restored} "
                f"| {restore} | {first_ms} ms | {rss} KiB |"
            )
        lines.append("")
    with open(os.path.join(out, "REPORT.md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1])

#!/usr/bin/env python3
"""REPORT.md for benches/wire/replicas_vs_single.sh: one broker against a replicated set of three
on workloads (a) and (b), medians of the repetitions, the set/single ratio of each figure and the
latency a send gains. Usage: replicas_report.py OUT_DIR"""

import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shm_report import medians  # noqa: E402  (the same figures, read the same way)


def main(out):
    runs = {}
    for path in sorted(glob.glob(os.path.join(out, "raw", "*.json"))):
        workload, mode, _rep = os.path.basename(path)[: -len(".json")].split("-")
        with open(path) as f:
            runs.setdefault((workload, mode), []).append(json.load(f))
    lines = ["# A replicated broker set against one broker (issue 27)", ""]
    meta = os.path.join(out, "meta.md")
    if os.path.exists(meta):
        lines += [open(meta).read().strip(), ""]
    lines += [
        "Same release binary, started fresh per run: `single` is one broker; `set` is three",
        "replicas (`--replica-peers`) on this machine with a standalone name server, the load",
        "going to the leader. Runs alternate; medians of the repetitions; ratio = set / single.",
        "Raw driver, 128 B messages, 4 queues. Broker CPU and RSS are the leader's.",
        "",
    ]
    for workload in sorted({w for w, _ in runs}):
        single, rset = runs.get((workload, "single"), []), runs.get((workload, "set"), [])
        if not single or not rset:
            continue
        lines += [
            f"## Workload ({workload}): {len(single)} single and {len(rset)} set runs",
            "",
            "| figure | single | set | set/single | set − single |",
            "|---|---:|---:|---:|---:|",
        ]
        for label, a, b, _better in medians(single, rset):
            ratio = b / a if a else float("nan")
            lines.append(f"| {label} | {a:,.1f} | {b:,.1f} | {ratio:.3f} | {b - a:+,.1f} |")
        lines.append("")
    with open(os.path.join(out, "REPORT.md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1])

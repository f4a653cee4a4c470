#!/usr/bin/env python3
"""The table of README.md in this directory, printed from the runs' JSON files (what `run.sh`
wrote: `<workload>-<driver>-r<N>.json`), so the README quotes the artefacts and nothing else.

    python3 benches/results/grpc/table.py     # prints the Markdown table
"""

import glob
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = ("paced", "max")
DRIVERS = ("grpc", "pop", "pull")


def n(x):
    """A figure as the README prints it: thousands separated, no decimals."""
    return f"{x:,.0f}"


def main():
    runs = {}
    for f in glob.glob(os.path.join(HERE, "*.json")):
        m = re.fullmatch(r"(paced|max)-(grpc|pop|pull)-r(\d+)\.json", os.path.basename(f))
        if m:
            with open(f, encoding="utf-8") as fh:
                runs[(m.group(1), int(m.group(3)), m.group(2))] = json.load(fh)
    if not runs:
        print(f"no <workload>-<driver>-r<N>.json in {HERE}", file=sys.stderr)
        return 1
    print("| workload | run | driver | sent msg/s | received msg/s | send p50 / p99 / p99.9 | end-to-end p50 / p99 / max | broker CPU µs/msg | clean |")
    print("|---|---|---|---:|---:|---|---|---:|---|")
    for w in WORKLOADS:
        for rep in sorted({k[1] for k in runs if k[0] == w}):
            for d in DRIVERS:
                r = runs.get((w, rep, d))
                if r is None:
                    continue
                s, e, b = r["send_rtt"], r["e2e"], r.get("broker") or {}
                print(
                    f"| {w} | r{rep} | {d} | {n(r['sent_per_s'])} | {n(r['received_per_s'])} | "
                    f"{n(s['p50'])} / {n(s['p99'])} / {n(s['p999'])} | {n(e['p50'])} / {n(e['p99'])} / {n(e['max'])} | "
                    f"{b.get('cpu_us_per_msg', float('nan')):.1f} | {'yes' if r['clean'] else '**no**'} |"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())

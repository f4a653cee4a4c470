#!/usr/bin/env python3
"""Writes REPORT.md of the same-driver request-latency benchmark (issue 28) from raw/*.json.

    python3 benches/samedriver/report.py [--results benches/results/samedriver]
    python3 benches/samedriver/report.py --check   # exit 1 if a raw file lacks a field

Standard library only. Each raw file is one run of one system (`<system>-r<N>.json`, written
by `baiji-samedriver run --out`). The excess of a run is its percentile minus the same
percentile of the same repetition's echo run (the floor); the summary takes medians over the
repetitions.
"""

import argparse
import glob
import json
import os
import re
import statistics
import sys

SYSTEMS = ["echo", "redis", "nats", "baiji-remoting", "baiji-grpc"]
REQUIRED = ["system", "requests", "warmup", "size", "request_bytes", "p50_us", "p90_us",
            "p99_us", "p999_us", "max_us", "mean_us", "timestamp", "command"]
NAME = re.compile(r"^(?P<system>[a-z-]+)-r(?P<rep>\d+)\.json$")

REQUESTS = {
    "echo": "the payload alone (no framing); the server writes back exactly what arrives and "
            "the driver reads until as many bytes are back",
    "redis": "`XADD samedriver * f <payload>` as one RESP array; the answer is the entry id as a "
             "bulk string (`-` would be an error). No MAXLEN: the stream grows by one entry per "
             "request, and every run starts a fresh server",
    "nats": "`PUB samedriver.bench <inbox> <size>` + payload to a JetStream memory stream "
            "(created in setup via `$JS.API.STREAM.CREATE`, CONNECT with headers and "
            "no_responders); the answer is the stream's ack `MSG <inbox> 1 <len>` with "
            "`{\"stream\":...,\"seq\":N}` (an `error` member aborts)",
    "baiji-remoting": "a RocketMQ remoting frame, SEND_MESSAGE_V2 (code 310) with the JSON header "
                      "the Java 4.9.7 client writes (fastjson field order, extFields a..k,m,n as "
                      "strings, properties `UNIQ_KEY`+`WAIT`), queue 0, the payload as body; the "
                      "answer frame's header must say code 0 (SUCCESS). Per request the opaque "
                      "and the UNIQ_KEY counter are patched in place. Setup sends one message "
                      "first (not measured)",
    "baiji-grpc": "HTTP/2 (h2c) HEADERS + DATA in one write: `MessagingService/SendMessage` with "
                  "the headers grpc-java and the Java 5.x SDK send (x-mq-client-id, "
                  "x-mq-language, x-mq-protocol, x-mq-client-version, x-mq-request-id, "
                  "x-mq-date-time, grpc-timeout, te, user-agent), HPACK without indexing or "
                  "Huffman, and one NORMAL message (message id, CRC32 digest, IDENTITY "
                  "encoding, born time and host); the answer is HEADERS, DATA, trailers: "
                  "`:status` 200, `grpc-status` 0 and `SendMessageResponse.status.code` OK "
                  "(20000), read with a full HPACK decoder. Per request the stream id, the "
                  "message id's and x-mq-request-id's counters are patched in place",
}

THREADS = {
    "echo": "the driver's `echo-server`: a blocking thread per connection (one connection here)",
    "redis": "Redis 7: one main thread runs every command (io-threads 1, the default)",
    "nats": "nats-server (Go): goroutines on GOMAXPROCS = the core count; a read and a write "
            "goroutine per client plus JetStream's stream goroutines",
    "baiji-remoting": "baiji: tokio multi-thread runtime, one worker per core (the default)",
    "baiji-grpc": "baiji: the same runtime; tonic/hyper serve the gRPC port",
}


def load(results):
    runs = []
    for path in sorted(glob.glob(os.path.join(results, "raw", "*.json"))):
        m = NAME.match(os.path.basename(path))
        if not m:
            continue
        with open(path, encoding="utf-8") as f:
            try:
                data = json.load(f)
            except json.JSONDecodeError as e:
                raise SystemExit(f"{path}: not JSON: {e}")
        data["_path"] = path
        data["_rep"] = int(m.group("rep"))
        data["_file_system"] = m.group("system")
        runs.append(data)
    return runs


def check(runs):
    problems = []
    for r in runs:
        missing = [k for k in REQUIRED if k not in r]
        if missing:
            problems.append(f"{r['_path']}: missing {', '.join(missing)}")
        elif r["system"] != r["_file_system"]:
            problems.append(f"{r['_path']}: system {r['system']!r} in a file named for "
                            f"{r['_file_system']!r}")
        else:
            for k in REQUIRED:
                if k.endswith("_us") and not isinstance(r[k], (int, float)):
                    problems.append(f"{r['_path']}: {k} is not a number")
    return problems


def fmt(x, digits=1):
    return "–" if x is None else f"{x:.{digits}f}"


def ratio(a, b):
    if a is None or b is None or b <= 0:
        return None
    return a / b


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def report(results, runs):
    reps = sorted({r["_rep"] for r in runs})
    by = {(r["system"], r["_rep"]): r for r in runs}
    present = [s for s in SYSTEMS if any(r["system"] == s for r in runs)]
    present += sorted({r["system"] for r in runs} - set(SYSTEMS))

    def excess(s, rep, key):
        r, e = by.get((s, rep)), by.get(("echo", rep))
        if r is None or e is None:
            return None
        return r[key] - e[key]

    first = runs[0]
    env_path = os.path.join(results, "environment.txt")
    env = open(env_path, encoding="utf-8").read() if os.path.exists(env_path) else ""
    head = {}
    for line in env.splitlines():
        if ": " in line and not line.startswith(" "):
            k, v = line.split(": ", 1)
            head.setdefault(k, v)

    out = []
    w = out.append
    w("# Same-driver request latency (issue 28)")
    w("")
    w(f"{len(reps)} repetition(s) × {first['requests']:,} measured requests (after "
      f"{first['warmup']:,} warmup requests) per system, {first['size']} B payload, one request "
      f"in flight, systems started fresh for every run in an order rotated each repetition. "
      f"Machine and load: `environment.txt`"
      + (f" ({head.get('cores', '?')} cores, {head.get('date', '')}, commit "
         f"`{head.get('git commit', '?')[:12]}`)." if head else "."))
    w("")
    w("## How it was run")
    w("")
    w("`benches/samedriver/run.sh` (RUNS, REQUESTS, WARMUP, SIZE, SYSTEMS in the environment) "
      "starts each system and runs the driver, e.g.:")
    w("")
    w("```sh")
    for s in present:
        r = next((r for r in runs if r["system"] == s), None)
        if r:
            cmd = re.sub(r"^\S*/baiji-samedriver", "baiji-samedriver", r["command"])
            cmd = re.sub(r"--out \S+", f"--out raw/{s}-r{r['_rep']}.json", cmd)
            w(cmd)
    w("```")
    w("")
    w("The driver (`benches/samedriver`, Rust std only, no async runtime) is **one thread** "
      "with one TCP connection (TCP_NODELAY). The request is encoded once before the loop; per "
      "request fixed-width fields are patched in place *before* the start stamp; the timed part "
      "is one `write` of the request and the reads until the whole answer is in and checked "
      "as a success (a failure aborts the run, it is never counted). Percentiles are nearest "
      "rank over the sorted samples.")
    w("")
    w("| system | request (bytes on the wire) | server threads |")
    w("|---|---|---|")
    for s in present:
        r = next(r for r in runs if r["system"] == s)
        w(f"| {s} | {REQUESTS.get(s, '')} ({r['request_bytes']} B) | {THREADS.get(s, '')} |")
    w("")
    w("## Summary")
    w("")
    w("Medians over the repetitions; *excess* = the system's percentile minus the same "
      "repetition's echo percentile (what the system adds to a bare TCP round trip).")
    w("")
    w("| system | runs | p50 µs | p99 µs | p99.9 µs | excess p50 µs | excess p99 µs | "
      "excess p99.9 µs |")
    w("|---|---|---|---|---|---|---|---|")
    summary = {}
    for s in present:
        rs = [by[(s, rep)] for rep in reps if (s, rep) in by]
        row = {
            "p50": med([r["p50_us"] for r in rs]),
            "p99": med([r["p99_us"] for r in rs]),
            "p999": med([r["p999_us"] for r in rs]),
            "x50": med([excess(s, rep, "p50_us") for rep in reps]),
            "x99": med([excess(s, rep, "p99_us") for rep in reps]),
            "x999": med([excess(s, rep, "p999_us") for rep in reps]),
        }
        summary[s] = row
        w(f"| {s} | {len(rs)} | {fmt(row['p50'])} | {fmt(row['p99'])} | {fmt(row['p999'])} | "
          f"{fmt(row['x50'])} | {fmt(row['x99'])} | {fmt(row['x999'])} |")
    w("")
    red = summary.get("redis")
    verdicts = []
    if red:
        w("| ratio of medians of excess | p50 | p99 |")
        w("|---|---|---|")
        for s in ["baiji-remoting", "baiji-grpc"]:
            if s in summary:
                b = summary[s]
                w(f"| {s} / redis | {fmt(ratio(b['x50'], red['x50']), 2)} | "
                  f"{fmt(ratio(b['x99'], red['x99']), 2)} |")
        w("")
        for s in ["baiji-remoting", "baiji-grpc"]:
            if s not in summary:
                continue
            b = summary[s]
            parts, met = [], []
            for k, label in [("x50", "p50"), ("x99", "p99")]:
                if b[k] is None or red[k] is None:
                    met.append(None)
                    parts.append(f"{label}: no figure")
                    continue
                met.append(b[k] <= red[k])
                parts.append(f"{label} {fmt(b[k])} µs vs Redis {fmt(red[k])} µs "
                             f"({'≤' if met[-1] else '>'})")
            if None in met:
                state = "not decidable"
            else:
                state = "**met**" if all(met) else "**missed**"
            verdicts.append(f"- {s}: {state} — {'; '.join(parts)}.")
    w("**Goal** (issue 28): baiji's excess over the floor ≤ Redis's at p50 and p99.")
    w("")
    if verdicts:
        out.extend(verdicts)
    else:
        w("- not decidable: no Redis or no baiji runs.")
    w("")
    w("## Every run")
    w("")
    w("| rep | system | p50 µs | p99 µs | p99.9 µs | max µs | excess p50 µs | excess p99 µs |")
    w("|---|---|---|---|---|---|---|---|")
    for rep in reps:
        order = sorted((r for r in runs if r["_rep"] == rep), key=lambda r: r.get("unix_ms", 0))
        for r in order:
            s = r["system"]
            w(f"| {rep} | {s} | {fmt(r['p50_us'])} | {fmt(r['p99_us'])} | "
              f"{fmt(r['p999_us'])} | {fmt(r['max_us'])} | {fmt(excess(s, rep, 'p50_us'))} | "
              f"{fmt(excess(s, rep, 'p99_us'))} |")
    w("")
    w("Rows are in the order the systems ran within each repetition. Raw results: `raw/`; "
      "driver and server logs: `logs/`.")
    w("")
    with open(os.path.join(results, "REPORT.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(out))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default = os.path.normpath(os.path.join(here, "..", "results", "samedriver"))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=default, help="folder with raw/ (default: %(default)s)")
    ap.add_argument("--check", action="store_true",
                    help="only check the raw files; exit 1 if one lacks a field")
    a = ap.parse_args()
    runs = load(a.results)
    if not runs:
        print(f"no raw results in {os.path.join(a.results, 'raw')}", file=sys.stderr)
        return 1
    problems = check(runs)
    if problems:
        for p in problems:
            print(p, file=sys.stderr)
        return 1
    if a.check:
        print(f"{len(runs)} raw files OK")
        return 0
    report(a.results, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env bash
# Before/after the broker-core redesign (issue 24): the wire benchmark's workloads (a) paced
# latency and (b) throughput through the raw remoting driver, and the gRPC workload of
# benches/results/grpc (2 producers, async, 32 in flight, 1 group of 2 members, SimpleConsumer),
# against two broker binaries, alternating within each repetition (order flipped every
# repetition) so machine noise falls on both. One driver binary for every run (the NEW one's
# `baiji bench`), so only the broker differs. A fresh broker per run. Driver and broker each run
# tokio's default runtime: 2 worker threads each (one per core) on this 2-core machine.
#   OLD=/work/bin/baiji-e77444b NEW=target/release/baiji REPS=3 benches/results/redesign/run.sh
set -u
OLD=${OLD:?the broker binary before}
NEW=${NEW:?the broker binary after}
DRIVER=${DRIVER:-$NEW}
OUT=${OUT:-benches/results/redesign}
REPS=${REPS:-3}
DURATION=${DURATION:-8}
WARMUP=${WARMUP:-2}
NS=127.0.0.1:29876
GRPC=127.0.0.1:28081
args() {
  case $1 in
    a) echo "--driver raw --rate 1000 --producers 1 --mode sync --groups 1 --size 128 --queues 4" ;;
    b) echo "--driver raw --producers 4 --mode async --inflight 16 --groups 1 --size 128 --queues 4" ;;
    grpc) echo "--driver grpc --grpc-endpoint $GRPC --producers 2 --mode async --inflight 32 --groups 1 --members 2 --queues 4 --size 128" ;;
  esac
}
mkdir -p "$OUT/raw"
echo "old $OLD ($(sha256sum "$OLD" | cut -c1-12)), new $NEW ($(sha256sum "$NEW" | cut -c1-12)), $(nproc) cores, $(date -u +%FT%TZ)" > "$OUT/environment.txt"
for rep in $(seq 1 "$REPS"); do
  if [ $((rep % 2)) = 1 ]; then order="old new"; else order="new old"; fi
  for w in a b grpc; do
    for side in $order; do
      if [ $side = old ]; then bin=$OLD; else bin=$NEW; fi
      name=$w-$side-r$rep
      "$bin" broker --listen 127.0.0.1:21911 --namesrv-listen $NS --grpc-listen $GRPC > /tmp/redesign-broker.log 2>&1 &
      pid=$!
      sleep 2
      echo "$name: load average $(cut -d' ' -f1-3 /proc/loadavg) before the run" >> "$OUT/environment.txt"
      echo "[$(date +%T)] $name" >&2
      # shellcheck disable=SC2046
      "$DRIVER" bench --namesrv $NS --broker-pid $pid $(args $w) --duration "$DURATION" --warmup "$WARMUP" \
        --workload "$w" --tcp-probe 0 -q --json "$OUT/raw/$name.json" > "$OUT/raw/$name.txt" 2>&1
      kill $pid; wait $pid 2>/dev/null
    done
  done
done
python3 - "$OUT" <<'PY'
import json, sys, glob, statistics as st, os
out = sys.argv[1]
rows = {}
for f in sorted(glob.glob(f"{out}/raw/*.json")):
    w, side, _ = os.path.basename(f)[:-5].split("-")
    d = json.load(open(f))
    b = d.get("broker") or {}
    rows.setdefault((w, side), []).append((d["sent_per_s"], d["send_rtt"]["p50"], d["send_rtt"]["p99"],
        d["e2e"]["p50"], d["e2e"]["p99"], b.get("cpu_us_per_msg", float("nan")), d["clean"]))
lines = ["| workload | broker | runs | sent msg/s | send p50 µs | send p99 µs | e2e p50 µs | e2e p99 µs | broker CPU µs/msg | clean |",
         "|---|---|---|---|---|---|---|---|---|---|"]
for w in ["a", "b", "grpc"]:
    for side in ["old", "new"]:
        r = rows.get((w, side))
        if not r: continue
        med = lambda i: st.median(x[i] for x in r)
        lines.append(f"| {w} | {side} | {len(r)} | {med(0):,.0f} | {med(1):.1f} | {med(2):.1f} | {med(3):.1f} | {med(4):.1f} | {med(5):.2f} | {all(x[6] for x in r)} |")
text = "Medians over the runs (each a fresh broker).\n\n" + "\n".join(lines) + "\n"
open(f"{out}/summary.md", "w").write(text)
print(text)
PY

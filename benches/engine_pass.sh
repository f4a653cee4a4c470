#!/usr/bin/env bash
# The engine pass: the engine's criterion benches one after the other, each output kept as
# cargo printed it in benches/results/engine/<bench>.txt under a `### cargo bench` header line
# (start time and load average), with benches/results/engine/environment.txt (date, compiler,
# cores, kernel, CPU, load, commit). benches/results/figures.py builds the README's engine
# table and the engine targets from these files. Not run by CI.
#
#   benches/engine_pass.sh                      # every bench of the pass
#   BENCHES="queue_latency" benches/engine_pass.sh   # one bench again (the others are kept)
#
# Threads: each bench says how many it runs (engine_throughput: up to 4 producers + 4 groups'
# consumers, more busy threads than this machine's 2 cores in its larger cases, which its
# output marks; queue_latency: one producer and one consumer per queue, paced). Run it on an
# otherwise idle machine: nothing else should build or benchmark beside it.
#
# Cost here (2 cores): building the benches (release, debuginfo) several minutes from cold;
# the runs about 6 minutes.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/benches/results/engine}
BENCHES=${BENCHES:-"engine_ops engine_throughput engine_throughput_mimalloc engine_memory engine_memory_mimalloc queue_latency queue_latency_mimalloc"}

cd "$ROOT"
mkdir -p "$OUT"
log() { echo "[$(date -u +%T)] $*" >&2; }

# Build first, so that no run pays for (or waits on) a build.
for b in $BENCHES; do
  log "building $b"
  cargo bench --bench "$b" --no-run
done

rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git status --porcelain --untracked-files=no 2>/dev/null | wc -l)
{
  date -u '+%a %b %d %H:%M:%S UTC %Y'
  rustc --version
  nproc
  uname -r
  lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1
  echo "load: $(cat /proc/loadavg)"
  if [ "$dirty" -gt 0 ]; then echo "commit: $rev ($dirty uncommitted paths)"; else echo "commit: $rev"; fi
} >"$OUT/environment.txt"

for b in $BENCHES; do
  log "running $b"
  {
    echo "### cargo bench --bench $b   (start $(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg))"
    cargo bench --bench "$b"
  } >"$OUT/$b.txt" 2>&1
  tail -n 3 "$OUT/$b.txt" >&2
done
echo finished >>"$OUT/environment.txt"
log "done: $OUT"

#!/usr/bin/env bash
# What a replicated broker set (issue 27, `--replica-peers`) costs on the wire benchmark's
# workloads (a) and (b): the same release binary as one broker (`single`: its embedded name
# server) and as a set of three replicas on this machine (`set`: a standalone `baiji namesrv`;
# the load goes to the leader, brokerId 0, through the route), alternating (single, set, ... with
# the first mode rotated each repetition), REPS repetitions, the raw driver. Writes
# $OUT/raw/*.json and $OUT/REPORT.md (replicas_report.py). Not run by CI.
#
#   benches/wire/replicas_vs_single.sh                   # 3 repetitions, workloads a and b
#   REPS=1 DURATION=5 benches/wire/replicas_vs_single.sh # a quick look
#
# Threads: each broker process's tokio runtime (2 workers on this 2-core machine), so the set
# runs three processes' workers on 2 cores beside the load generator's producers and consumer
# (workload a: 1 producer at 1,000/s, 1 group; b: 4 producers x 16 in flight): the set's figures
# include that contention, which three machines would not have, and the loopback round trip to
# a follower is shorter than a LAN's. "broker CPU" is the leader's alone (--broker-pid).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/benches/results/replicas}
REPS=${REPS:-3}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
WORKLOADS=${WORKLOADS:-"a b"}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
BAIJI="$TARGET_DIR/release/baiji"
# shellcheck source=benches/wire/modes.sh
. "$ROOT/benches/wire/modes.sh"
NS=19876 BROKER=20911 RAFT=20950

PIDS=()
stop() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  PIDS=()
}
trap stop EXIT

LEADER=""
start() { # mode logprefix
  local mode=$1 prefix=$2
  if [ "$mode" = single ]; then
    "$BAIJI" broker --listen "127.0.0.1:$BROKER" --namesrv-listen "127.0.0.1:$NS" \
      --grpc-listen off --fast-listen-port 0 --memory-budget 4g >"$prefix.broker.log" 2>&1 &
    PIDS+=($!)
    LEADER=$!
    wait_port "$BROKER" 60 && wait_port "$NS" 60
    return
  fi
  "$BAIJI" namesrv --listen "127.0.0.1:$NS" >"$prefix.namesrv.log" 2>&1 &
  PIDS+=($!)
  wait_port "$NS" 60
  local peers="1=127.0.0.1:$RAFT;2=127.0.0.1:$((RAFT + 1));3=127.0.0.1:$((RAFT + 2))"
  local i
  for i in 1 2 3; do
    "$BAIJI" broker --listen "127.0.0.1:$((BROKER + 10 * i))" --no-namesrv \
      --namesrv-addr "127.0.0.1:$NS" --grpc-listen off --fast-listen-port 0 --memory-budget 4g \
      --broker-name bench-set --replica-id "$i" --replica-peers "$peers" \
      >"$prefix.replica-$i.log" 2>&1 &
    PIDS+=($!)
  done
  # The leader: the replica whose log says it leads, once the route has it.
  LEADER=""
  for _ in $(seq 200); do
    for i in 1 2 3; do
      if grep -q "leading the broker set" "$prefix.replica-$i.log" 2>/dev/null; then
        LEADER=${PIDS[$i]}
      fi
    done
    [ -n "$LEADER" ] && break
    sleep 0.05
  done
  [ -n "$LEADER" ] || { log "no leader"; return 1; }
  sleep 1 # the registration as brokerId 0 reaches the name server
}

main() {
  log "building baiji (release)"
  (cd "$ROOT" && cargo build --release --bin baiji)
  mkdir -p "$OUT/raw" "$OUT/logs"
  {
    echo "Run on $(date -u '+%Y-%m-%d %H:%M') UTC at baiji commit \`$(git -C "$ROOT" rev-parse --short HEAD)\`"
    echo "($(git -C "$ROOT" status --porcelain | wc -l) uncommitted paths), $(nproc) cores,"
    echo "load average at start $(cut -d' ' -f1-3 /proc/loadavg)."
  } >"$OUT/meta.md"
  local modes=(single set)
  for rep in $(seq 1 "$REPS"); do
    for w in $WORKLOADS; do
      for i in 0 1; do
        local m=${modes[$(((i + rep - 1) % 2))]}
        local tag="$w-$m-r$rep"
        log "run $tag"
        start "$m" "$OUT/logs/$tag"
        # shellcheck disable=SC2046
        "$BAIJI" bench --driver raw --namesrv "127.0.0.1:$NS" --broker-pid "$LEADER" --system baiji \
          --workload "$w" --quiet --json "$OUT/raw/$tag.json" $(workload_args "$w") \
          >"$OUT/logs/$tag.txt" 2>&1 || log "run $tag failed; see $OUT/logs/$tag.txt"
        stop
      done
    done
  done
  python3 "$ROOT/benches/wire/replicas_report.py" "$OUT"
}

main "$@"

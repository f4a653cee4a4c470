#!/usr/bin/env bash
# What the store directory (issue 26, `--store-path-root-dir` on tmpfs) costs on the wire
# benchmark's workloads (a) and (b): the same release broker started fresh for every run with
# and without the directory, alternating (heap, shm, heap, shm, ... with the first mode
# rotated each repetition), REPS repetitions, the raw driver; then the recovery time of a
# broker killed with SIGKILL holding N retained messages of SIZE bytes (from process start to
# the first answered send). Writes $OUT/raw/*.json, $OUT/recovery.tsv and $OUT/REPORT.md.
# Not run by CI.
#
#   benches/wire/shm_vs_heap.sh                          # 3 repetitions, both workloads
#   REPS=1 DURATION=5 benches/wire/shm_vs_heap.sh        # a quick look
#   RECOVERY="1000000:128 8388608:128" benches/wire/shm_vs_heap.sh
#   ONLY_RECOVERY=1 benches/wire/shm_vs_heap.sh          # the recovery runs only
#
# Threads: the broker's tokio runtime (2 workers on this 2-core machine) and its reaper and
# segment-maintenance threads; the load generator's producers and consumer (workload a: 1
# producer, 1 group; b: 4 producers x 16 in flight). Cost here: ~14 s per run plus start-up;
# 2 workloads x 2 modes x 3 repetitions ~ 4 min, then the recovery runs.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/benches/results/shm}
REPS=${REPS:-3}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
WORKLOADS=${WORKLOADS:-"a b d"}
BACKLOG=${BACKLOG:-1000000}
# Recovery cases: COUNT:SIZE (1M x 128 B, and 1 GiB as 1M x 1 KiB).
RECOVERY=${RECOVERY:-"1000000:128 1048576:1024"}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
BAIJI="$TARGET_DIR/release/baiji"
# shellcheck source=benches/wire/modes.sh
. "$ROOT/benches/wire/modes.sh"
SHM_BASE=${SHM_BASE:-/dev/shm/baiji-bench-shm}
NS=19876 BROKER=20911

PID=""
stop() {
  [ -n "$PID" ] || return 0
  kill "$PID" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$PID" 2>/dev/null || true
  wait "$PID" 2>/dev/null || true
  PID=""
}
trap 'stop; rm -rf "$SHM_BASE"' EXIT

start() { # mode logfile budget [extra broker args...]
  local mode=$1 file=$2 budget=$3
  shift 3
  local args=(broker --listen "127.0.0.1:$BROKER" --namesrv-listen "127.0.0.1:$NS"
    --grpc-listen off --memory-budget "$budget" "$@")
  if [ "$mode" = shm ]; then args+=(--store-path-root-dir "$SHM_BASE"); fi
  "$BAIJI" "${args[@]}" >"$file" 2>&1 &
  PID=$!
  wait_port "$BROKER" 60 && wait_port "$NS" 60
}

main() {
  log "building baiji (release)"
  (cd "$ROOT" && cargo build --release --bin baiji)
  mkdir -p "$OUT/raw" "$OUT/logs"
  [ "${ONLY_RECOVERY:-}" = 1 ] || {
    echo "Run on $(date -u '+%Y-%m-%d %H:%M') UTC at baiji commit \`$(git -C "$ROOT" rev-parse --short HEAD)\`"
    echo "($(git -C "$ROOT" status --porcelain | wc -l) uncommitted paths), $(nproc) cores,"
    echo "load average at start $(cut -d' ' -f1-3 /proc/loadavg); shm directory $SHM_BASE ($(stat -f -c %T /dev/shm))."
  } >"$OUT/meta.md"
  [ "${ONLY_RECOVERY:-}" = 1 ] || : >"$OUT/dir_kb.tsv"
  local modes=(heap shm)
  for rep in $(seq 1 "$REPS"); do
    [ "${ONLY_RECOVERY:-}" = 1 ] && break
    for w in $WORKLOADS; do
      for i in 0 1; do
        local m=${modes[$(((i + rep - 1) % 2))]}
        local tag="$w-$m-r$rep"
        rm -rf "$SHM_BASE"
        log "run $tag"
        start "$m" "$OUT/logs/$tag.broker.log" 4g
        local idle_kb
        idle_kb=$(du -sk "$SHM_BASE" 2>/dev/null | cut -f1 || echo 0)
        # shellcheck disable=SC2046
        "$BAIJI" bench --driver raw --namesrv "127.0.0.1:$NS" --broker-pid "$PID" --system baiji \
          --workload "$w" --quiet --json "$OUT/raw/$tag.json" $(workload_args "$w") \
          >"$OUT/logs/$tag.txt" 2>&1 || log "run $tag failed; see $OUT/logs/$tag.txt"
        # The directory's size after the run (workload d: after draining the backlog).
        printf '%s\t%s\t%s\n' "$tag" "${idle_kb:-0}" "$(du -sk "$SHM_BASE" 2>/dev/null | cut -f1 || echo 0)" >>"$OUT/dir_kb.tsv"
        stop
      done
    done
  done
  recovery
  python3 "$ROOT/benches/wire/shm_report.py" "$OUT"
}

# Fills a broker on the directory with COUNT retained messages of SIZE bytes (no consumer),
# kills it with SIGKILL, starts it again and times process start -> first answered send.
recovery() {
  printf 'count\tsize\tretained_bytes\trestored\trestore_ms\tfirst_send_ms\trss_kb\n' >"$OUT/recovery.tsv"
  for case in $RECOVERY; do
    local count=${case%%:*} size=${case##*:}
    rm -rf "$SHM_BASE"
    log "recovery: filling $count x $size B"
    # Kept with no group: retention long and large enough for all of them.
    local keep=(--retention-secs 86400 --retention-bytes 4g)
    start shm "$OUT/logs/recovery-$count-$size.fill.log" 8g "${keep[@]}"
    "$BAIJI" bench --driver raw --namesrv "127.0.0.1:$NS" --broker-pid "$PID" --system baiji \
      --workload d --backlog --count "$count" --producers 1 --mode batch --batch 64 \
      --groups 0 --size "$size" --queues 4 --warmup 0 --topic recovery_fill --quiet \
      >"$OUT/logs/recovery-$count-$size.fill.txt" 2>&1 || log "fill failed"
    kill -9 "$PID"; wait "$PID" 2>/dev/null || true; PID=""
    local log_file="$OUT/logs/recovery-$count-$size.restart.log"
    # Process start -> first answered send, by a minimal remoting client (first_send.py).
    local out ms_first
    out=$(python3 "$ROOT/benches/wire/first_send.py" "127.0.0.1:$BROKER" recovery_fill -- \
      "$BAIJI" broker --listen "127.0.0.1:$BROKER" --namesrv-listen "127.0.0.1:$NS" \
      --grpc-listen off --memory-budget 8g "${keep[@]}" --store-path-root-dir "$SHM_BASE" \
      2>"$log_file") || log "first send failed: $out"
    ms_first=${out%% *}
    PID=$(echo "$out" | cut -d' ' -f2)
    local restored ms
    restored=$(grep -o '[0-9]* messages restored' "$log_file" | grep -o '^[0-9]*' || echo '?')
    ms=$(grep -o 'restored in [0-9.]* s' "$log_file" | grep -o '[0-9.]*' || echo '?')
    local rss
    rss=$(awk '/VmRSS/ {print $2}' "/proc/$PID/status" 2>/dev/null || echo '?')
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$count" "$size" "$((count * size))" "$restored" \
      "$ms" "$ms_first" "$rss" >>"$OUT/recovery.tsv"
    stop
  done
}

main "$@"

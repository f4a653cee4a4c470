#!/usr/bin/env bash
# The same-driver request-latency benchmark of issue 28: one blocking driver (this crate, std
# only, one thread, one request in flight) sends a pre-encoded stored-and-acknowledged publish
# and waits for its answer, the same loop and payload for every system:
#   echo            the driver's own TCP echo server: the floor (no broker work)
#   redis           Debian's redis-server (--save '' --appendonly no): XADD
#   nats            Debian's nats-server -js: publish with ack to a memory stream
#   baiji-remoting  baiji's remoting port: SEND_MESSAGE_V2 as the Java 4.9.7 client encodes it
#   baiji-grpc      baiji's gRPC port: MessagingService/SendMessage over h2c
# Each system is started fresh for each run, on loopback ports away from the defaults; the
# order of the systems is rotated every repetition. The two baiji modes use separate broker
# starts (same binary and flags). Writes $OUT/raw/<system>-r<N>.json, $OUT/environment.txt and
# $OUT/REPORT.md (report.py). Not run by CI.
#
#   benches/samedriver/run.sh                               # 8 x 20,000 requests per system
#   RUNS=1 REQUESTS=2000 WARMUP=200 benches/samedriver/run.sh   # a smoke test
#   SYSTEMS="echo baiji-remoting" benches/samedriver/run.sh
#   BAIJI_BIN=/path/to/baiji benches/samedriver/run.sh      # measure that binary, build none
#
# Cost: building baiji's release binary (fat LTO) takes several minutes on 2 cores; each run
# is about a second plus the system's start.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE="$ROOT/benches/samedriver"
OUT=${OUT:-$ROOT/benches/results/samedriver}
RUNS=${RUNS:-8}
REQUESTS=${REQUESTS:-20000}
WARMUP=${WARMUP:-2000}
SIZE=${SIZE:-128}
SYSTEMS=${SYSTEMS:-"echo redis nats baiji-remoting baiji-grpc"}
NICE=${NICE:-5}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
DRIVER_TARGET=${DRIVER_TARGET:-$HERE/target}
DRIVER="$DRIVER_TARGET/release/baiji-samedriver"
BAIJI_UNDER_TEST="$TARGET_DIR/release/baiji-samedriver-broker"

# Loopback ports, away from the defaults (and from benches/wire's).
ECHO_PORT=17911 REDIS_PORT=26379 NATS_PORT=24222
BAIJI_PORT=21911 BAIJI_NS=29877 BAIJI_GRPC=28081 BAIJI_METRICS=25557
BROKER_NAME=baiji-a # baiji's default --broker-name, named explicitly

# log, wait_port, install_peers
# shellcheck source=benches/wire/modes.sh
. "$ROOT/benches/wire/modes.sh"

install() {
  install_peers
  if [ -n "${BAIJI_BIN:-}" ]; then
    log "baiji under test: $BAIJI_BIN (BAIJI_BIN; not built)"
    BAIJI_UNDER_TEST=$BAIJI_BIN
  else
    REV=$(tree_rev)
    log "building baiji (release, the default binary) at $REV"
    (cd "$ROOT" && CARGO_TARGET_DIR="$TARGET_DIR" nice -n "$NICE" cargo build --release --bin baiji)
    # A private copy: a later build does not change the binary under test.
    cp "$TARGET_DIR/release/baiji" "$BAIJI_UNDER_TEST"
  fi
  log "building the driver (release)"
  (cd "$HERE" && CARGO_TARGET_DIR="$DRIVER_TARGET" nice -n "$NICE" cargo build --release)
}

PID="" SYS_DIR="" REV=""
stop_system() {
  if [ -n "$PID" ]; then
    kill "$PID" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$PID" 2>/dev/null || break; sleep 0.05; done
    kill -9 "$PID" 2>/dev/null || true
    wait "$PID" 2>/dev/null || true
  fi
  PID=""
  if [ -n "$SYS_DIR" ]; then rm -rf "$SYS_DIR"; fi
  SYS_DIR=""
}
trap stop_system EXIT

start_system() { # system logfile; sets PID and ADDR
  SYS_DIR=$(mktemp -d /tmp/baiji-samedriver-XXXXXX)
  case "$1" in
    echo)
      "$DRIVER" echo-server --port "$ECHO_PORT" >"$2" 2>&1 &
      PID=$!
      ADDR="127.0.0.1:$ECHO_PORT" ;;
    redis)
      redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
        --dir "$SYS_DIR" --daemonize no >"$2" 2>&1 &
      PID=$!
      ADDR="127.0.0.1:$REDIS_PORT" ;;
    nats)
      nats-server -a 127.0.0.1 -p "$NATS_PORT" -js -sd "$SYS_DIR/js" >"$2" 2>&1 &
      PID=$!
      ADDR="127.0.0.1:$NATS_PORT" ;;
    baiji-remoting | baiji-grpc)
      "$BAIJI_UNDER_TEST" broker --listen "127.0.0.1:$BAIJI_PORT" --fast-listen-port 0 \
        --namesrv-listen "127.0.0.1:$BAIJI_NS" --grpc-listen "127.0.0.1:$BAIJI_GRPC" \
        --metrics-listen "127.0.0.1:$BAIJI_METRICS" --broker-name "$BROKER_NAME" >"$2" 2>&1 &
      PID=$!
      wait_port "$BAIJI_NS" 30 && wait_port "$BAIJI_GRPC" 30 || return 1
      if [ "$1" = baiji-remoting ]; then ADDR="127.0.0.1:$BAIJI_PORT"; else ADDR="127.0.0.1:$BAIJI_GRPC"; fi ;;
    *) log "unknown system $1"; return 1 ;;
  esac
  wait_port "${ADDR##*:}" 30
}

# Messages baiji says it stored in the bench topic (rocketmq_messages_in_total).
baiji_stored() {
  local text
  text=$(exec 3<>"/dev/tcp/127.0.0.1/$BAIJI_METRICS" &&
    printf 'GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' >&3 && cat <&3) || return 0
  echo "$text" | awk '/^rocketmq_messages_in_total\{/ && /topic="samedriver-bench"/ {s += $NF} END {print s + 0}'
}

# The commit the work tree is at, and whether the broker's sources differ from it (read when
# the build starts: the binary is what the tree held then).
tree_rev() {
  local rev
  rev=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
  if [ -n "$(git -C "$ROOT" status --porcelain -- src proto build.rs Cargo.toml Cargo.lock 2>/dev/null)" ]; then
    rev="$rev (with uncommitted changes under src/, proto/, build.rs or Cargo.*)"
  fi
  echo "$rev"
}

environment() {
  {
    echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    [ -n "$REV" ] || REV="$(tree_rev) (the work tree; the broker under test is BAIJI_BIN)"
    echo "git commit: $REV"
    echo "baiji binary: ${BAIJI_BIN:-built from the work tree, cargo build --release --bin baiji}"
    echo "uname: $(uname -a)"
    echo "cores: $(nproc)"
    echo "memory: $(free -g 2>/dev/null | awk '/Mem:/{print $2}') GiB"
    echo "redis: $(redis-server --version)"
    echo "nats: $(nats-server --version)"
    echo "rustc: $(rustc --version)"
    echo "settings: RUNS=$RUNS REQUESTS=$REQUESTS WARMUP=$WARMUP SIZE=$SIZE SYSTEMS=\"$SYSTEMS\""
    echo
    echo "lscpu:"
    lscpu 2>/dev/null | grep -v '^Flags' | head -20 | sed 's/^/  /'
    echo
    echo "uptime (load average) before each run:"
  } >"$OUT/environment.txt"
}

main() {
  install
  mkdir -p "$OUT/raw" "$OUT/logs"
  rm -f "$OUT"/raw/*.json
  environment
  local systems=($SYSTEMS)
  local n=${#systems[@]}
  local failed=0
  for rep in $(seq 1 "$RUNS"); do
    for i in $(seq 0 $((n - 1))); do
      local s=${systems[$(((i + rep - 1) % n))]}
      local tag="$s-r$rep"
      echo "  $tag: $(uptime)" >>"$OUT/environment.txt"
      log "run $tag"
      if ! start_system "$s" "$OUT/logs/$tag.server.log"; then
        log "$s did not start; see $OUT/logs/$tag.server.log"
        stop_system
        failed=1
        continue
      fi
      if ! "$DRIVER" run --system "$s" --addr "$ADDR" --requests "$REQUESTS" --warmup "$WARMUP" \
          --size "$SIZE" --broker-name "$BROKER_NAME" --out "$OUT/raw/$tag.json" \
          2>"$OUT/logs/$tag.driver.log"; then
        log "run $tag failed: $(tail -n 3 "$OUT/logs/$tag.driver.log")"
        failed=1
      else
        tail -n 1 "$OUT/logs/$tag.driver.log" >&2
      fi
      case "$s" in
        baiji-*)
          local stored want=$((REQUESTS + WARMUP + 1)) # + the remoting setup's first send
          [ "$s" = baiji-grpc ] && want=$((REQUESTS + WARMUP))
          stored=$(baiji_stored)
          echo "stored (rocketmq_messages_in_total, topic samedriver-bench): $stored, expected $want" \
            >>"$OUT/logs/$tag.driver.log"
          if [ "$stored" != "$want" ]; then
            log "run $tag: baiji stored $stored messages, expected $want"
            failed=1
          fi ;;
      esac
      stop_system
    done
  done
  python3 "$HERE/report.py" --results "$OUT"
  log "wrote $OUT/REPORT.md"
  [ "$failed" = 0 ] || { log "some runs failed; see $OUT/logs"; exit 1; }
}

main "$@"

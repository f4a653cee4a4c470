#!/usr/bin/env bash
# Side-by-side benchmark of baiji against the brokers a RocketMQ user would otherwise pick:
#   rocketmq-rust  the Rust port of RocketMQ (crates rocketmq-namesrv + rocketmq-broker 1.0.0,
#                  persistent, cargo-installed into $TOOLS)
#   redis          Debian's redis-server, persistence off; Redis Streams XADD / XREADGROUP + XACK
#   nats           Debian's nats-server with JetStream, memory storage; publish with ack, pull
#                  consumer with ack
# Every system runs on loopback with a temporary data directory and is started fresh for every
# run; workloads are run against all systems in turn, in an order rotated each repetition, so
# machine noise spreads over all of them. Writes $OUT/raw/*.json, $OUT/meta.md, and then
# $OUT/REPORT.md with SVG plots. Not run by CI.
#
#   benches/wire/run.sh                       # everything: install, build, 3 repetitions
#   REPS=1 DURATION=5 benches/wire/run.sh     # a quick look
#   SYSTEMS="baiji redis" WORKLOADS="a b" benches/wire/run.sh
#   DRIVERS="raw client" benches/wire/run.sh  # also rocketmq-client-rust (builds feature bench-client)
#   RESUME=1 benches/wire/run.sh              # finish an interrupted run: only the missing cells
#
# Cost here (2 cores): first install ~25 min (two cargo installs, baiji, this crate); then per
# repetition ~6 min with the defaults.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WIRE_DIR="$ROOT/benches/wire"
TOOLS=${TOOLS:-${BAIJI_BENCH_TOOLS:-$HOME/.cache/baiji-bench}}
OUT=${OUT:-$ROOT/benches/results}
REPS=${REPS:-3}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
BACKLOG=${BACKLOG:-1000000}
SYSTEMS=${SYSTEMS:-"baiji rocketmq-rust redis nats"}
WORKLOADS=${WORKLOADS:-"a b c c1 d"}
DRIVERS=${DRIVERS:-raw}
NICE=${NICE:-5}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
WIRE_TARGET=${WIRE_TARGET:-$WIRE_DIR/target}

# Loopback ports, away from the defaults so a developer's own broker is not disturbed.
BAIJI_NS=19876 BAIJI_BROKER=20911
RMQ_NS=29876 RMQ_BROKER=30911
REDIS_PORT=16379 NATS_PORT=14222

# log, wait_port, install_peers
# shellcheck source=benches/wire/modes.sh
. "$WIRE_DIR/modes.sh"

install() {
  install_peers
  # The distribution's redis-server service is not what we measure; ours runs on $REDIS_PORT.
  for crate in rocketmq-namesrv rocketmq-broker; do
    bin="$TOOLS/bin/${crate}-rust"
    if [ ! -x "$bin" ]; then
      log "cargo install $crate 1.0.0 into $TOOLS (about 10 minutes)"
      nice -n "$NICE" cargo install "$crate" --version 1.0.0 --root "$TOOLS"
    fi
  done
  # The broker under test is the binary users run (default features). The load generator may
  # need the client driver (feature bench-client), which links rocketmq-client-rust and its
  # dependency tree; built with it, the broker's idle and drained RSS grew by ~3 and ~7 MiB, so
  # the two are separate binaries.
  log "building baiji (release, default features): the broker"
  (cd "$ROOT" && nice -n "$NICE" cargo build --release --bin baiji)
  cp "$TARGET_DIR/release/baiji" "$BAIJI_BROKER_BIN"
  local features=""
  case " $DRIVERS " in *" client "*) features="--features bench-client" ;; esac
  log "building baiji (release${features:+, $features}): the load generator"
  (cd "$ROOT" && nice -n "$NICE" cargo build --release --bin baiji $features)
  log "building the peers crate (release)"
  (cd "$WIRE_DIR" && CARGO_TARGET_DIR="$WIRE_TARGET" nice -n "$NICE" cargo build --release)
}

BAIJI="$TARGET_DIR/release/baiji"
BAIJI_BROKER_BIN="$TARGET_DIR/release/baiji-broker-under-test"
WIRE="$WIRE_TARGET/release/baiji-wire"

PIDS=() ; EXTRA_PID="" ; BROKER_PID="" ; SYS_DIR="" ; ADDR=""
stop_system() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  PIDS=() ; EXTRA_PID="" ; BROKER_PID=""
  [ -n "$SYS_DIR" ] && rm -rf "$SYS_DIR"
  SYS_DIR=""
}
trap stop_system EXIT

start_system() { # name logfile
  SYS_DIR=$(mktemp -d /tmp/baiji-wire-XXXXXX)
  case "$1" in
    baiji)
      "$BAIJI_BROKER_BIN" broker --listen "127.0.0.1:$BAIJI_BROKER" --namesrv-listen "127.0.0.1:$BAIJI_NS" \
        --memory-budget 4g >"$2" 2>&1 &
      BROKER_PID=$! ; PIDS=($!)
      wait_port "$BAIJI_BROKER" 20 ; wait_port "$BAIJI_NS" 20
      ADDR="127.0.0.1:$BAIJI_NS" ;;
    rocketmq-rust)
      mkdir -p "$SYS_DIR/home" "$SYS_DIR/store" "$SYS_DIR/conf"
      cat >"$SYS_DIR/conf/broker.toml" <<EOF
[broker]
listenPort = $RMQ_BROKER
brokerIp1 = "127.0.0.1"
storePathRootDir = "$SYS_DIR/store"
namesrvAddr = "127.0.0.1:$RMQ_NS"

[broker.brokerServerConfig]
bindAddress = "127.0.0.1"

[broker.brokerIdentity]
brokerName = "rmq-a"
brokerClusterName = "DefaultCluster"
brokerId = 0

[store]
haListenAddress = "127.0.0.1"
haListenPort = $((RMQ_BROKER + 1))
storePathRootDir = "$SYS_DIR/store"
EOF
      (cd "$SYS_DIR" && HOME="$SYS_DIR/home" ROCKETMQ_HOME="$SYS_DIR" exec "$TOOLS/bin/rocketmq-namesrv-rust" \
        --listenPort "$RMQ_NS" --bindAddress 127.0.0.1 >"$2.namesrv" 2>&1) &
      EXTRA_PID=$! ; PIDS=($!)
      wait_port "$RMQ_NS" 30
      (cd "$SYS_DIR" && HOME="$SYS_DIR/home" ROCKETMQ_HOME="$SYS_DIR" exec "$TOOLS/bin/rocketmq-broker-rust" \
        -c "$SYS_DIR/conf/broker.toml" -n "127.0.0.1:$RMQ_NS" >"$2" 2>&1) &
      BROKER_PID=$! ; PIDS+=($!)
      wait_port "$RMQ_BROKER" 60
      ADDR="127.0.0.1:$RMQ_NS" ;;
    redis)
      redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
        --dir "$SYS_DIR" --daemonize no >"$2" 2>&1 &
      BROKER_PID=$! ; PIDS=($!)
      wait_port "$REDIS_PORT" 20
      ADDR="127.0.0.1:$REDIS_PORT" ;;
    nats)
      nats-server -a 127.0.0.1 -p "$NATS_PORT" -js -sd "$SYS_DIR/js" >"$2" 2>&1 &
      BROKER_PID=$! ; PIDS=($!)
      wait_port "$NATS_PORT" 20
      ADDR="127.0.0.1:$NATS_PORT" ;;
    *) log "unknown system $1"; return 1 ;;
  esac
}

bench_cmd() { # system driver
  case "$1" in
    baiji|rocketmq-rust) echo "$BAIJI bench --driver $2" ;;
    *) echo "$WIRE bench --driver $1" ;;
  esac
}

drivers_for() { # system workload
  # The client driver's push consumer starts consuming as soon as it joins, so it cannot hold
  # a backlog: workload d (broker memory, the driver does not matter) uses the raw driver.
  case "$1" in
    baiji|rocketmq-rust) if [ "$2" = d ]; then echo raw; else echo "$DRIVERS"; fi ;;
    *) echo "$1" ;;
  esac
}

write_meta() {
  local rev
  rev=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
  {
    echo "Run on $(date -u '+%Y-%m-%d %H:%M UTC') at baiji commit \`$rev\`, $REPS alternating repetitions per system and workload."
    echo
    echo "**Machine:** $(nproc) cores ($(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)), $(free -g | awk '/Mem:/{print $2}') GiB RAM, $(uname -sr), $(. /etc/os-release; echo "$PRETTY_NAME"). Load average at start: $(cut -d' ' -f1-3 /proc/loadavg). The machine is shared with other engineers' builds; runs alternate so that contention spreads over all systems."
    echo
    echo "**Systems:** baiji (\`baiji broker --memory-budget 4g\`, defaults otherwise); rocketmq-rust = rocketmq-namesrv + rocketmq-broker $("$TOOLS/bin/rocketmq-broker-rust" --version 2>/dev/null | sed -n 's/version=//p') (persistent, default flush settings, store in a temp dir); $(redis-server --version | cut -d' ' -f1-3) (\`--save '' --appendonly no\`); $(nats-server --version) (\`-js\`, streams with memory storage, interest retention). Each is started fresh, on loopback, for every run."
    echo
    echo "**Drivers:** \`raw\` = baiji's raw RocketMQ protocol driver (the same for baiji and rocketmq-rust); \`client\` = rocketmq-client-rust 1.0.0; \`redis\` = crate redis 1.8 (multiplexed connection); \`nats\` = crate async-nats 0.51. All drivers share the runner of \`baiji::bench\`: the same pacing, stamps, checks and histograms."
    echo
    echo "**Commands** (reproduce everything with \`benches/wire/run.sh\`; \`<addr>\` is the system's loopback address, \`<pid>\` its broker process):"
    echo
    echo '```sh'
    for w in $WORKLOADS; do
      echo "# workload $w"
      echo "baiji bench --driver raw|client --namesrv <addr> --broker-pid <pid> --system baiji|rocketmq-rust --workload $w $(workload_args "$w")"
      echo "baiji-wire bench --driver redis|nats --namesrv <addr> --broker-pid <pid> --workload $w $(workload_args "$w")"
    done
    echo '```'
  } >"$OUT/meta.md"
}

main() {
  install
  mkdir -p "$OUT/raw" "$OUT/logs"
  # RESUME=1 keeps meta.md and every cell written since it (same binaries if nothing was
  # rebuilt: check the commit in meta.md), and runs only the missing cells.
  [ -n "${RESUME:-}" ] && [ -f "$OUT/meta.md" ] || write_meta
  local systems=($SYSTEMS)
  local n=${#systems[@]}
  for rep in $(seq 1 "$REPS"); do
    for w in $WORKLOADS; do
      for i in $(seq 0 $((n - 1))); do
        local s=${systems[$(((i + rep - 1) % n))]}
        for d in $(drivers_for "$s" "$w"); do
          local tag="$w-$s-$d-r$rep"
          if [ -n "${RESUME:-}" ] && [ "$OUT/raw/$tag.json" -nt "$OUT/meta.md" ]; then
            log "have $tag (RESUME)"; continue
          fi
          log "run $tag"
          # A system that does not come up (the persistent peer failed its start-up once under
          # load) costs its cell, not the rest of the run.
          if ! start_system "$s" "$OUT/logs/$tag.broker.log"; then
            log "run $tag: $s did not start; see $OUT/logs/$tag.broker.log"
            stop_system
            continue
          fi
          local extra=""
          [ -n "$EXTRA_PID" ] && extra="--extra-pid $EXTRA_PID"
          # shellcheck disable=SC2046
          if ! $(bench_cmd "$s" "$d") --namesrv "$ADDR" --broker-pid "$BROKER_PID" $extra \
              --system "$s" --workload "$w" --quiet --json "$OUT/raw/$tag.json" \
              $(workload_args "$w") >"$OUT/logs/$tag.txt" 2>&1; then
            log "run $tag failed; see $OUT/logs/$tag.txt"
          fi
          tail -n 12 "$OUT/logs/$tag.txt" >&2 || true
          stop_system
        done
      done
    done
  done
  "$WIRE" report --results "$OUT"
}

main "$@"

#!/usr/bin/env bash
# A persistent RocketMQ broker and a baiji broker in ONE cluster, under a real RocketMQ name
# server, checked with the real Rust client (examples/cluster_check.rs): every broker is
# registered, a producer that knows only the name server spreads one topic over both brokers'
# queues, and one consumer group of two members receives every message from both, exactly once.
# Then the same with baiji's own name server in place of the real one (a persistent broker
# registering with baiji).
#
# Not part of CI: building rocketmq-broker takes over 10 minutes here. Run it by hand:
#     tests/mixed_cluster.sh                 # both name servers
#     tests/mixed_cluster.sh real            # only under rocketmq-namesrv
#     tests/mixed_cluster.sh baiji           # only under baiji's name server
# Environment:
#   BAIJI_TOOLS        where rocketmq-broker (and, if needed, rocketmq-namesrv) are installed,
#                      outside the repository; default ~/.cache/baiji-tools. First run: cargo
#                      install rocketmq-broker 1.0.0 (~15-25 min on 2 cores).
#   BAIJI_NAMESRV_BIN  a rocketmq-namesrv-rust binary; default .tools/namesrv (.ci/install-namesrv)
#   MESSAGES           messages per check (default 2000); BASE_PORT (default 19870).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
tools="${BAIJI_TOOLS:-$HOME/.cache/baiji-tools}"
messages="${MESSAGES:-2000}"
base="${BASE_PORT:-19870}"
which="${1:-both}"
t0=$(date +%s)
say() { echo "[mixed $(( $(date +%s) - t0 ))s] $*"; }

# --- tools --------------------------------------------------------------------------------
broker_bin="$tools/broker/bin/rocketmq-broker-rust"
if [[ ! -x "$broker_bin" ]]; then
    say "installing rocketmq-broker 1.0.0 into $tools/broker (takes over 10 min)"
    s=$(date +%s)
    nice -n 5 cargo install rocketmq-broker --version =1.0.0 --locked --root "$tools/broker"
    say "installed rocketmq-broker in $(( $(date +%s) - s )) s"
fi
namesrv_bin="${BAIJI_NAMESRV_BIN:-$repo/.tools/namesrv/bin/rocketmq-namesrv-rust}"
if [[ ! -x "$namesrv_bin" ]]; then
    .ci/install-namesrv
fi
say "$("$broker_bin" --version | tr '\n' ' ')/ $("$namesrv_bin" --version | tr '\n' ' ')"
say "building baiji (release) and the checker (debug example)"
nice -n 5 cargo build --release --quiet --bin baiji
nice -n 5 cargo build --quiet --example cluster_check
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
baiji="$target_dir/release/baiji"
check="$target_dir/debug/examples/cluster_check"

# --- processes ----------------------------------------------------------------------------
work="$(mktemp -d "${TMPDIR:-/tmp}/baiji-mixed.XXXXXX")"
# rocketmq-broker 1.0.0 refuses to start when the disk holding its store is 75 % full or more
# (diskMaxUsedSpaceRatio): it registers, then rolls its startup back, logging only "disk
# capacity requires reclaim" and "Service lifecycle operation failed". Say so up front.
used_pct=$(df --output=pcent "$work" | tail -1 | tr -dc '0-9')
if [[ -n "$used_pct" && "$used_pct" -ge 75 ]]; then
    say "WARNING: the disk under $work is ${used_pct}% full; rocketmq-broker will not start at 75% or more"
fi
pids=()
stop_pid() { # pid: SIGTERM, then up to 10 s to exit, then SIGKILL
    kill -TERM "$1" 2>/dev/null || return 0
    for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
    echo "pid $1 ignored SIGTERM for 10 s; killing it"
    kill -KILL "$1" 2>/dev/null || true
}
cleanup() { # newest first: brokers unregister before their name server goes
    local i
    for (( i=${#pids[@]}-1; i>=0; i-- )); do stop_pid "${pids[$i]}"; done
    pids=()
}
trap 'cleanup; echo "logs: $work"' EXIT

wait_port() { # port what
    for _ in $(seq 300); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    echo "$2 did not listen on $1 within 30 s; its log:"; tail -n 40 "$work/$2.log"; return 1
}

start_real_namesrv() { # port
    mkdir -p "$work/ns-$1/home"
    (cd "$work/ns-$1" && HOME="$work/ns-$1/home" ROCKETMQ_HOME="$work/ns-$1" \
        exec "$namesrv_bin" --listenPort "$1" --bindAddress 127.0.0.1) >"$work/namesrv-$1.log" 2>&1 &
    pids+=($!)
    wait_port "$1" "namesrv-$1"
}

start_baiji_namesrv() { # port
    "$baiji" namesrv --listen "127.0.0.1:$1" >"$work/namesrv-$1.log" 2>&1 &
    pids+=($!)
    wait_port "$1" "namesrv-$1"
}

start_rocketmq_broker() { # name port namesrv
    local dir="$work/$1"
    mkdir -p "$dir/conf" "$dir/home" "$dir/store"
    cat >"$dir/conf/broker.toml" <<EOF
[broker]
namesrvAddr = "$3"
brokerIp1 = "127.0.0.1"
listenPort = $2
storePathRootDir = "$dir/store"

[broker.brokerServerConfig]
bindAddress = "127.0.0.1"

[broker.brokerIdentity]
brokerName = "$1"
brokerClusterName = "MixedCluster"
brokerId = 0

[store]
storeType = "LocalFile"
brokerRole = "ASYNC_MASTER"
storePathRootDir = "$dir/store"
haListenAddress = "127.0.0.1"
haListenPort = $(( $2 + 1 ))
EOF
    (cd "$dir" && HOME="$dir/home" ROCKETMQ_HOME="$dir" ROCKETMQ_SECURITY_PROFILE=development-insecure-loopback \
        exec "$broker_bin" -c "$dir/conf/broker.toml" -n "$3") >"$work/$1.log" 2>&1 &
    pids+=($!)
    wait_port "$2" "$1"
}

start_baiji_broker() { # name port namesrv
    RUST_LOG=info "$baiji" broker --listen "127.0.0.1:$2" --namesrv-addr "$3" \
        --cluster-name MixedCluster --broker-name "$1" >"$work/$1.log" 2>&1 &
    pids+=($!)
    wait_port "$2" "$1"
}

run_case() { # label namesrv-kind port-offset
    local ns_port=$(( base + $3 )) rmq_port=$(( base + $3 + 10 )) baiji_port=$(( base + $3 + 20 ))
    local ns="127.0.0.1:$ns_port"
    say "=== $1: rocketmq-broker 'rmq-a' (:$rmq_port, fast :$(( rmq_port - 2 )), HA :$(( rmq_port + 1 ))) + baiji 'baiji-a' (:$baiji_port) under $2 name server $ns"
    if [[ $2 == real ]]; then start_real_namesrv "$ns_port"; else start_baiji_namesrv "$ns_port"; fi
    local s=$(date +%s)
    start_rocketmq_broker rmq-a "$rmq_port" "$ns"
    say "rocketmq-broker listening after $(( $(date +%s) - s )) s"
    start_baiji_broker baiji-a "$baiji_port" "$ns"
    local rc=0
    "$check" --namesrv "$ns" --cluster MixedCluster --brokers rmq-a,baiji-a \
        --topic "Mixed$2Topic" --messages "$messages" || rc=$?
    # Both brokers stop cleanly (SIGTERM): each unregisters, and the name server forgets them.
    s=$(date +%s)
    stop_pid "${pids[2]}"; stop_pid "${pids[1]}"
    say "both brokers stopped in $(( $(date +%s) - s )) s"
    "$check" --namesrv "$ns" --cluster MixedCluster --brokers rmq-a,baiji-a --absent || rc=$?
    if [[ $rc -ne 0 ]]; then
        say "$1 FAILED; log tails:"
        for f in "$work"/*.log; do echo "--- $f"; tail -n 15 "$f"; done
    fi
    cleanup
    return $rc
}

status=0
case "$which" in
    real) run_case "under rocketmq-namesrv" real 0 || status=1 ;;
    baiji) run_case "under baiji namesrv" baiji 50 || status=1 ;;
    both)
        run_case "under rocketmq-namesrv" real 0 || status=1
        run_case "under baiji namesrv" baiji 50 || status=1
        ;;
    *) echo "usage: $0 [real|baiji|both]"; exit 2 ;;
esac
say "done: $([[ $status -eq 0 ]] && echo PASS || echo FAIL)"
exit $status

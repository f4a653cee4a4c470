# Shared by the bench scripts (run.sh, shm_vs_heap.sh, replicas_vs_single.sh and
# benches/samedriver/run.sh): sourced, not run. workload_args needs DURATION, WARMUP and, for
# workload d, BACKLOG.

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

wait_port() { # port seconds
  local end=$((SECONDS + $2))
  while ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; do
    [ $SECONDS -lt $end ] || { log "port $1 did not open"; return 1; }
    sleep 0.05
  done
}

# Debian's redis-server and nats-server, the peers the wire and same-driver benchmarks compare
# baiji with, installed if either is missing.
install_peers() {
  if ! command -v redis-server >/dev/null || ! command -v nats-server >/dev/null; then
    log "installing redis-server and nats-server from Debian"
    if [ "$(id -u)" = 0 ]; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server nats-server
    else
      sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server nats-server
    fi
  fi
}

# The load generator's flags for workload $1, the same for every system: (a) 1 sync producer
# at 1,000/s, (b) 4 async producers x 16 in flight, (c) 1 async producer x 16 in flight of
# 1 KiB to 4 groups, (c1) the same to 1 group, (d) a backlog of BACKLOG sent in batches of 64,
# then drained; 128 B messages unless said, 4 queues, 1 group unless said.
workload_args() {
  case "$1" in
    a) echo "--rate 1000 --producers 1 --mode sync --groups 1 --size 128 --queues 4 --duration $DURATION --warmup $WARMUP" ;;
    b) echo "--producers 4 --mode async --inflight 16 --groups 1 --size 128 --queues 4 --duration $DURATION --warmup $WARMUP" ;;
    c) echo "--producers 1 --mode async --inflight 16 --groups 4 --size 1024 --queues 4 --duration $DURATION --warmup $WARMUP" ;;
    c1) echo "--producers 1 --mode async --inflight 16 --groups 1 --size 1024 --queues 4 --duration $DURATION --warmup $WARMUP" ;;
    d) echo "--backlog --count $BACKLOG --producers 1 --mode batch --batch 64 --groups 1 --size 128 --queues 4 --warmup 0 --drain-timeout 600 --settle 5" ;;
  esac
}

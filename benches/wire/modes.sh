# Shared by the scripts that compare two modes of one release broker on the wire benchmark's
# workloads (shm_vs_heap.sh, replicas_vs_single.sh): sourced, not run. Needs DURATION, WARMUP
# and, for workload d, BACKLOG.

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

wait_port() { # port seconds
  local end=$((SECONDS + $2))
  while ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; do
    [ $SECONDS -lt $end ] || { log "port $1 did not open"; return 1; }
    sleep 0.05
  done
}

# The load generator's flags for workload $1: (a) 1 sync producer at 1,000/s, (b) 4 async
# producers x 16 in flight, (d) a backlog of BACKLOG sent in batches of 64, then drained; 128 B
# messages, 4 queues, 1 group.
workload_args() {
  case "$1" in
    a) echo "--rate 1000 --producers 1 --mode sync --groups 1 --size 128 --queues 4 --duration $DURATION --warmup $WARMUP" ;;
    b) echo "--producers 4 --mode async --inflight 16 --groups 1 --size 128 --queues 4 --duration $DURATION --warmup $WARMUP" ;;
    d) echo "--backlog --count $BACKLOG --producers 1 --mode batch --batch 64 --groups 1 --size 128 --queues 4 --warmup 0 --drain-timeout 600 --settle 5" ;;
  esac
}

#!/usr/bin/env bash
# gRPC beside remoting (issue 14): the same two workloads as benches/results/pop/ — paced
# (latency: 2 producers, sync, 5000 msg/s) and unpaced (throughput: 2 producers, async, 32 in
# flight) — 128 B, 4 queues, 1 group of 2 members, 8 s measured after 2 s of warm-up, each
# through three drivers: grpc (SendMessage; SimpleConsumer ReceiveMessage + AckMessage), raw
# with --consume pop and raw with --consume pull. A fresh release broker per run; drivers
# alternate within each repetition. Run from the repository root after
# `cargo build --release --bin baiji`; writes into benches/results/grpc/.
set -u
BIN=${BIN:-./target/release/baiji}
OUT=benches/results/grpc
REPS=${REPS:-2}
NS=127.0.0.1:29876
GRPC=127.0.0.1:28081
echo "commit $(git rev-parse --short HEAD), $(nproc) cores, $(date -u +%FT%TZ)" > $OUT/environment.txt
for rep in $(seq 1 "$REPS"); do
  for load in paced max; do
    if [ $load = paced ]; then shape="--mode sync --rate 5000"; else shape="--mode async --inflight 32"; fi
    for drv in grpc pop pull; do
      if [ $drv = grpc ]; then how="--driver grpc --grpc-endpoint $GRPC"; else how="--driver raw --consume $drv"; fi
      name=$load-$drv-r$rep
      $BIN broker --listen 127.0.0.1:21911 --namesrv-listen $NS --grpc-listen $GRPC > /tmp/grpc-bench-broker.log 2>&1 &
      pid=$!
      sleep 2
      echo "$name: load average $(cut -d' ' -f1-3 /proc/loadavg) before the run" >> $OUT/environment.txt
      cmd="$BIN bench --namesrv $NS --broker-pid $pid $how --producers 2 $shape --groups 1 --members 2 --queues 4 --size 128 --duration 8 --warmup 2 --workload $load-$drv --tcp-probe 0 -q --json $OUT/$name.json"
      { echo "\$ $cmd"; $cmd; } > $OUT/$name.txt 2>&1
      kill $pid; wait $pid 2>/dev/null
      python3 - "$OUT/$name.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
b = d.get("broker") or {}
print(f"{sys.argv[1]}: {d['sent_per_s']:.0f} msg/s sent, {d['received_per_s']:.0f} received, "
      f"send p50 {d['send_rtt']['p50']:.0f} p99 {d['send_rtt']['p99']:.0f} µs, "
      f"e2e p50 {d['e2e']['p50']:.0f} p99 {d['e2e']['p99']:.0f} µs, "
      f"broker CPU {b.get('cpu_us_per_msg', 0):.1f} µs/msg, clean {d['clean']}")
PY
    done
  done
done

#!/usr/bin/env bash
# workload b (throughput): 4 producers async inflight 16, 1 group, 128 B, 4 queues; the broker
# before the metrics endpoint (d8eb407) vs after (its counters on the send and pull paths;
# endpoint not scraped), alternating, the same (after) bench driver for both.
set -u
B=${BEFORE:-/tmp/metrics-bins/before}
A=${AFTER:-/tmp/metrics-bins/after}
REPS=${REPS:-5}
for rep in $(seq 1 "$REPS"); do
  for which in before after; do
    bin=$B; [ $which = after ] && bin=$A
    $bin broker --listen 127.0.0.1:23911 --namesrv-listen 127.0.0.1:23876 > broker-$which-$rep.log 2>&1 &
    pid=$!
    sleep 2
    $A bench --namesrv 127.0.0.1:23876 --broker-pid $pid --system baiji-$which --workload b --quiet --json b-$which-r$rep.json \
      --producers 4 --mode async --inflight 16 --groups 1 --size 128 --queues 4 --duration 10 --warmup 2 > bench-$which-$rep.txt 2>&1
    kill $pid; wait $pid 2>/dev/null
    python3 -c "import json;d=json.load(open('b-$which-r$rep.json'));print('$which r$rep', round(d['sent_per_s']), round(d['received_per_s']), d.get('broker_cpu_us_per_msg', ''), 'load', open('/proc/loadavg').read().split()[0])"
  done
done

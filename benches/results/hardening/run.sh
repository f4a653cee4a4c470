#!/usr/bin/env bash
# workload b (throughput): 4 producers async inflight 16, 1 group, 128 B, 4 queues; before vs after, alternating.
set -u
B=/work/wt/before-target/release/baiji
A=/work/wt/after-target/release/baiji
for rep in 1 2 3; do
  for which in before after; do
    bin=$B; [ $which = after ] && bin=$A
    $bin broker --listen 127.0.0.1:21911 --namesrv-listen 127.0.0.1:29876 > broker-$which-$rep.log 2>&1 &
    pid=$!
    sleep 2
    $A bench --namesrv 127.0.0.1:29876 --broker-pid $pid --system baiji-$which --workload b --quiet --json b-$which-r$rep.json \
      --producers 4 --mode async --inflight 16 --groups 1 --size 128 --queues 4 --duration 10 --warmup 2 > bench-$which-$rep.txt 2>&1
    kill $pid; wait $pid 2>/dev/null
    python3 -c "import json;d=json.load(open('b-$which-r$rep.json'));print('$which r$rep', round(d['sent_per_s']), round(d['received_per_s']), d.get('broker_cpu_us_per_msg', ''))"
  done
done

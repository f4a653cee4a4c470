#!/bin/bash
# usage: prof.sh BIN TAG [workload]
BIN=$1; TAG=$2; W=${3:-b}
cd "${OUT_DIR:-.}"
env $BENV $BIN broker --listen 127.0.0.1:20911 --namesrv-listen 127.0.0.1:19876 --memory-budget 4g --grpc-listen off $BARGS > broker-$TAG.log 2>&1 &
BP=$!
for i in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/20911) 2>/dev/null && break; sleep 0.1; done
case $W in
 b) ARGS="--producers 4 --mode async --inflight 16 --groups 1 --size 128 --queues 4";;
 c) ARGS="--producers 1 --mode async --inflight 16 --groups 4 --size 1024 --queues 4";;
 c1) ARGS="--producers 1 --mode async --inflight 16 --groups 1 --size 1024 --queues 4";;
 a) ARGS="--rate 1000 --producers 1 --mode sync --groups 1 --size 128 --queues 4";;
esac
${BENCH_BIN:-target/release/baiji} bench --driver raw --namesrv 127.0.0.1:19876 --broker-pid $BP --system baiji --workload $W $ARGS --duration 10 --warmup 2 --json bench-$TAG.json > bench-$TAG.txt 2>&1 &
BENCH=$!
if [ -n "$PERF" ]; then sleep 4; perf record -F 499 --call-graph dwarf,16384 -o perf-$TAG.data -p $BP -- sleep 6 > perf-$TAG.log 2>&1; fi
wait $BENCH
kill $BP; wait $BP 2>/dev/null
grep -E "sent|recv|cpu|msg/s" bench-$TAG.txt | head -20

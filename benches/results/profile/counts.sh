#!/bin/bash
# usage: counts.sh BIN TAG  -- per-message syscalls, context switches and allocations of the broker under workload b
BIN=$1; TAG=$2
cd "${OUT_DIR:-.}"
perf probe -d 'probe_*:*' >/dev/null 2>&1
[ -n "$NOPROBE" ] || for f in mi_malloc_aligned mi_zalloc_aligned mi_realloc_aligned; do perf probe -q -x $BIN $f >/dev/null 2>&1; done
msgs() { curl -s 127.0.0.1:5557/metrics | awk '/^rocketmq_messages_in_total/ && /is_system="false"/ {s+=$2} END {print s+0}'; }
(
  sleep 5
  BP=$(pgrep -f "$(basename $BIN) broker --listen 127.0.0.1:20911" | head -1)
  m0=$(msgs)
  perf stat -x, -o perfstat-$TAG.txt -e 'syscalls:sys_enter_recvfrom,syscalls:sys_enter_writev,syscalls:sys_enter_sendto,syscalls:sys_enter_futex,syscalls:sys_enter_epoll_wait,context-switches' \
    $( [ -n "$NOPROBE" ] || echo "-e probe_*:*" ) -p $BP -- sleep 4
  m1=$(msgs)
  echo "messages $((m1-m0))" >> perfstat-$TAG.txt
) &
BARGS="--metrics-listen 127.0.0.1:5557" "$(dirname "$0")"/prof.sh $BIN $TAG b | tail -1
wait
perf probe -d 'probe_*:*' >/dev/null 2>&1
python3 - perfstat-$TAG.txt <<'PY'
import sys
rows=[l.strip().split(',') for l in open(sys.argv[1]) if l.strip() and not l.startswith('#')]
n=int([r for r in rows if r[0].startswith('messages')][0][0].split()[1])
print('messages in window', n)
for r in rows:
    if r[0].startswith('messages'): continue
    try: v=float(r[0])
    except: continue
    print(f'{r[2]:45s} {v:12.0f}  {v/n:6.2f} per message')
PY

#!/usr/bin/env bash
# `baiji top` on a real terminal (outside CI; needs tmux): starts a broker with its embedded
# name server, sends load with `baiji bench` (one producer, one consumer group, paced), runs
# `baiji top` in a detached tmux pane, captures the pane with `tmux capture-pane -p` and checks
# what it shows: the broker row with its memory budget, the topic with a message rate, the
# consumer group. Prints the captured screen. Exit status 0 when every check holds.
#
#   tests/top_tmux.sh                 # uses target/debug/baiji (cargo build first)
#   BAIJI=target/release/baiji tests/top_tmux.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BAIJI=${BAIJI:-target/debug/baiji}
command -v tmux >/dev/null || { echo "tmux is required" >&2; exit 2; }
[ -x "$BAIJI" ] || { echo "$BAIJI not built (cargo build)" >&2; exit 2; }

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
NS=127.0.0.1:$(port)
BR=127.0.0.1:$(port)
SESSION=baiji-top-$$
WORK=$(mktemp -d)
cleanup() {
  tmux kill-session -t "$SESSION" 2>/dev/null || true
  [ -n "${BENCH:-}" ] && kill "$BENCH" 2>/dev/null || true
  [ -n "${BROKER:-}" ] && kill "$BROKER" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

"$BAIJI" broker --listen "$BR" --namesrv-listen "$NS" --memory-budget 268435456 >"$WORK/broker.log" 2>&1 &
BROKER=$!
for _ in $(seq 100); do grep -q "baiji broker started" "$WORK/broker.log" && break; sleep 0.1; done
grep -q "baiji broker started" "$WORK/broker.log" || { cat "$WORK/broker.log"; exit 1; }

"$BAIJI" bench --namesrv "$NS" --topic TopTopic --queues 4 --rate 300 --duration 30 --warmup 1 \
  --size 512 --quiet >"$WORK/bench.log" 2>&1 &
BENCH=$!

tmux new-session -d -s "$SESSION" -x 160 -y 40 "$BAIJI top --namesrv $NS"
# Two samples at least (rates need a previous one), under load.
ok=0
for _ in $(seq 60); do
  sleep 0.5
  SCREEN=$(tmux capture-pane -p -t "$SESSION")
  if grep -q "TopTopic" <<<"$SCREEN" && grep -Eq "TopTopic .* [1-9][0-9.]*/s" <<<"$SCREEN"; then
    ok=1
    break
  fi
done
sleep 1
SCREEN=$(tmux capture-pane -p -t "$SESSION")
echo "$SCREEN"
echo "----"
fail() { echo "FAIL: $1" >&2; exit 1; }
[ "$ok" = 1 ] || fail "the topic row never showed a message rate"
grep -q "namesrv $NS" <<<"$SCREEN" || fail "the title names the name server"
grep -Eq "DefaultCluster +baiji-a +$BR" <<<"$SCREEN" || fail "the broker row (cluster, name, address)"
grep -Eq "/ 256.0 MiB \([0-9.]+%\)" <<<"$SCREEN" || fail "the memory budget used"
grep -Eq "TopTopic +baiji-a +4 " <<<"$SCREEN" || fail "the topic row with its 4 queues"
grep -Eq "^│ *[^ ]+ +baiji-a +[0-9.]+/s +[0-9]+ +[0-9.]+ (B|KiB|MiB) +0 " <<<"$SCREEN" \
  || fail "a consumer-group row with rate, lag, held memory and drops"
tmux send-keys -t "$SESSION" q
for _ in $(seq 20); do tmux has-session -t "$SESSION" 2>/dev/null || break; sleep 0.1; done
tmux has-session -t "$SESSION" 2>/dev/null && fail "q quits"
echo "top_tmux: all checks passed"

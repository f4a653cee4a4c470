#!/usr/bin/env bash
# A real Prometheus server scraping baiji's metrics endpoint under load (issue 15 item 2): starts
# a baiji broker with --metrics-listen, a Prometheus server scraping it every second, and
# `baiji bench` (raw driver: producers and consumer groups); after the load has run a while it
# saves one scrape and asks Prometheus for the rate of messages in per topic and the lag per
# group, and fails if Prometheus did not see messages flowing.
#
# Not part of CI (CI checks the text with `promtool check metrics`, tests/broker_raw/metrics.rs).
# Run it by hand:
#     tests/metrics_prometheus.sh
# Needs: Debian's `prometheus` package (the `prometheus` binary), curl, python3.
# Environment:
#   BAIJI_BIN   the baiji binary (default: `cargo build --release --bin baiji`, then
#               $CARGO_TARGET_DIR or target/release/baiji)
#   BASE_PORT   four consecutive ports from here (default 19960): broker, name server,
#               metrics, Prometheus
#   SECONDS_OF_LOAD  how long the bench sends (default 40); RATE messages/s (default 2000)
#   OUT         where the scrape and the query results go (default a temporary directory)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
base="${BASE_PORT:-19960}"
load="${SECONDS_OF_LOAD:-40}"
rate="${RATE:-2000}"
out="${OUT:-$(mktemp -d -t baiji-metrics-XXXXXX)}"
mkdir -p "$out"
t0=$(date +%s)
say() { echo "[metrics $(( $(date +%s) - t0 ))s] $*"; }

command -v prometheus >/dev/null || { echo "prometheus not found: apt-get install prometheus" >&2; exit 2; }
if [[ -z "${BAIJI_BIN:-}" ]]; then
    nice cargo build --release --bin baiji
    BAIJI_BIN="${CARGO_TARGET_DIR:-$repo/target}/release/baiji"
fi

broker=127.0.0.1:$base
namesrv=127.0.0.1:$((base + 1))
metrics=127.0.0.1:$((base + 2))
prom=127.0.0.1:$((base + 3))
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT

"$BAIJI_BIN" broker --listen "$broker" --namesrv-listen "$namesrv" --metrics-listen "$metrics" \
    --cluster-name MetricsCluster --broker-name baiji-m >"$out/broker.log" 2>&1 &
pids+=($!)
cat >"$out/prometheus.yml" <<EOF
global: { scrape_interval: 1s, evaluation_interval: 1s }
scrape_configs:
  - job_name: baiji
    static_configs: [{ targets: ["$metrics"] }]
EOF
prometheus --config.file="$out/prometheus.yml" --storage.tsdb.path="$out/tsdb" \
    --web.listen-address="$prom" >"$out/prometheus.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 60); do
    curl -fsS "http://$metrics/metrics" >/dev/null 2>&1 && curl -fsS "http://$prom/-/ready" >/dev/null 2>&1 && break
    sleep 1
done
curl -fsS "http://$metrics/metrics" >/dev/null || { say "baiji's endpoint does not answer"; exit 1; }
curl -fsS "http://$prom/-/ready" >/dev/null || { say "Prometheus is not ready"; exit 1; }
say "baiji on $broker (metrics $metrics), Prometheus on $prom; load: $rate msg/s for $load s"

"$BAIJI_BIN" bench --namesrv "$namesrv" --topic MetricsLoad --queues 4 -p 2 -g 2 \
    --rate "$rate" --duration "$load" --warmup 2 -q >"$out/bench.log" 2>&1 &
bench=$!
pids+=($bench)
sleep $(( load / 2 + 5 ))
curl -fsS "http://$metrics/metrics" >"$out/scrape-under-load.txt"
say "scrape under load: $(grep -vc '^#' "$out/scrape-under-load.txt") samples -> $out/scrape-under-load.txt"
query() {
    curl -fsS "http://$prom/api/v1/query" --data-urlencode "query=$1"
}
rate_q='sum by (topic) (rate(rocketmq_messages_in_total{topic="MetricsLoad"}[15s]))'
lag_q='max by (consumer_group) (rocketmq_consumer_lag_messages{topic="MetricsLoad"})'
out_q='sum by (consumer_group) (rate(rocketmq_messages_out_total{topic="MetricsLoad"}[15s]))'
query "$rate_q" >"$out/query-rate-in.json"
query "$lag_q" >"$out/query-lag.json"
query "$out_q" >"$out/query-rate-out.json"
wait "$bench" || { say "the bench failed: $(tail -5 "$out/bench.log")"; exit 1; }
python3 - "$out" "$rate_q" "$lag_q" "$out_q" <<'PY'
import json, sys
out, queries = sys.argv[1], sys.argv[2:]
ok = True
for name, q in zip(["query-rate-in", "query-lag", "query-rate-out"], queries):
    r = json.load(open(f"{out}/{name}.json"))
    print(f"{q}")
    series = r["data"]["result"]
    for s in series:
        print(f"    {s['metric']} = {float(s['value'][1]):.1f}")
    if name == "query-rate-in" and not any(float(s["value"][1]) > 0 for s in series):
        ok = False
        print("    no messages flowing: FAILED")
sys.exit(0 if ok else 1)
PY
say "bench: $(grep -E 'msg/s|throughput' "$out/bench.log" | head -2 | tr '\n' ' ')"
say "done; files in $out"

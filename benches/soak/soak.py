#!/usr/bin/env python3
"""Mixed soak of one baiji broker (issue 23): memory flat, nothing acknowledged lost, every half
message decided or discarded by the rules.

Usage (from the repository root, after `cargo build --release` and `.ci/test`'s Python venv):

    python3 benches/soak/soak.py --minutes 20 --out benches/results/soak

The broker runs with `--memory-budget 384m --group-idle-secs 30 --transaction-check-interval
1000 --transaction-check-max 5 --pop-retry-max-times 2` and this load, all on loopback:

- `soak_pop_topic`: a remoting producer (--pop-rate msg/s); two raw-frame POP consumers of
  group `soak_pop` (invisible 5 s) that never acknowledge 1 % of the messages (seq % 100 == 7),
  so those are revived into %RETRY%, redelivered twice and dead-lettered;
- `soak_simple_topic`: a remoting producer (--simple-rate msg/s) read by two gRPC SimpleConsumers
  of group `soak_simple` (rocketmq-python-client 5.1.2), and every --throwaway-secs s a new
  SimpleConsumer of a group never used again (`soak_tmp_<n>`) that receives once and leaves;
- `soak_tx_topic`: a transactional producer of group `soak_tx` (--tx-rate half messages/s) that
  commits 40 % at once, rolls back 15 % at once, leaves 45 % undecided and answers the broker's
  checks: commit (15 %), rollback (10 %), unknown for ever (10 %, discarded after 5 checks), and
  10 % with CHECK_IMMUNITY_TIME_IN_SECONDS=60, committed when checked. Every 60 s a producer of
  group `soak_gone` sends 20 half messages and disconnects (no live producer: discarded);
  read by a raw POP consumer of group `soak_tx_reader`.
- raw POP readers of %DLQ%soak_pop and TRANS_CHECK_MAX_TIME_TOPIC record what arrives there;
  both keep what was read for --dlq-retention-secs (300 s here: RocketMQ's 72 h would grow
  them through the whole run, which is the rule, not a leak).

Every 10 s it samples the broker's RSS and /metrics. At the end it stops the producers, lets
the consumers drain for --drain-secs, reads the dead-letter topic and TRANS_CHECK_MAX_TIME_TOPIC
with PULL, and checks:
  every answered send of soak_pop_topic was acknowledged or dead-lettered; of soak_simple_topic
  received; of committed transactions received; no rolled-back, unknown or orphaned half
  message delivered, the unknown and orphaned ones found in TRANS_CHECK_MAX_TIME_TOPIC;
  no refused send; memory used below the budget at every sample; the mean RSS and memory used
  of the last quarter within --flat-tolerance of the second quarter's.
Writes samples.csv, summary.json and summary.md to --out; exits 1 if a check fails.
"""

import argparse
import csv
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import remoting as rm  # noqa: E402

POP_TOPIC = "soak_pop_topic"
SIMPLE_TOPIC = "soak_simple_topic"
TX_TOPIC = "soak_tx_topic"
POP_GROUP = "soak_pop"
TX_READER = "soak_tx_reader"
TX_GROUP = "soak_tx"
GONE_GROUP = "soak_gone"
CHECK_MAX_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class State:
    """Everything the threads record, under one lock."""

    def __init__(self):
        self.lock = threading.Lock()
        self.stop_producers = threading.Event()
        self.stop_all = threading.Event()
        self.sent = {POP_TOPIC: set(), SIMPLE_TOPIC: set()}
        self.refused = []
        self.errors = []
        self.acked_pop = set()
        self.failed_pop = set()
        self.pop_deliveries = 0
        self.ack_failures = 0
        self.received_simple = set()
        self.simple_deliveries = 0
        self.throwaway_groups = 0
        self.tx_kind = {}  # body -> intended outcome
        self.tx_received = set()
        self.dlq_seen = set()
        self.discarded_seen = set()
        self.tx_checks = 0
        self.tx_check_answers = {}
        self.counts = {}

    def bump(self, k, n=1):
        with self.lock:
            self.counts[k] = self.counts.get(k, 0) + n

    def error(self, where, e):
        with self.lock:
            if len(self.errors) < 200:
                self.errors.append(f"{time.strftime('%H:%M:%S')} {where}: {e}")


def uniq_id():
    return uuid.uuid4().hex.upper()


def paced(st, rate, one):
    """Calls one(seq) at `rate` per second until the producers stop."""
    seq = 0
    t0 = time.monotonic()
    while not st.stop_producers.is_set():
        due = t0 + seq / rate
        now = time.monotonic()
        if due > now:
            time.sleep(min(due - now, 0.2))
            continue
        one(seq)
        seq += 1


def producer(st, addr, topic, prefix, rate):
    conn = rm.Conn(addr)

    def one(seq):
        nonlocal conn
        body = f"{prefix}:{seq}"
        try:
            r = rm.send(conn, "soak_producer", topic, body.encode(), {"UNIQ_KEY": uniq_id(), "KEYS": body, "WAIT": "true"})
        except (rm.Timeout, rm.Closed, OSError) as e:
            st.error(f"send {topic}", e)
            conn = rm.Conn(addr)
            return
        if r.code == rm.SUCCESS:
            with st.lock:
                st.sent[topic].add(body)
        else:
            with st.lock:
                st.refused.append((topic, body, r.code, r.remark))

    paced(st, rate, one)
    conn.close()


def pop_consumer(st, addr, broker_name):
    conn = rm.Conn(addr)
    while not st.stop_all.is_set():
        try:
            got = rm.popped(rm.pop(conn, POP_GROUP, POP_TOPIC, invisible_ms=5000, poll_ms=1000), broker_name)
        except (rm.Timeout, rm.Closed, OSError) as e:
            st.error("pop", e)
            time.sleep(0.5)
            conn = rm.Conn(addr)
            continue
        for m in got:
            body = m["body"].decode()
            seq = int(body.split(":")[1])
            with st.lock:
                st.pop_deliveries += 1
            if seq % 100 == 7:
                with st.lock:
                    st.failed_pop.add(body)
                continue
            try:
                r = rm.ack(conn, POP_GROUP, m)
            except (rm.Timeout, rm.Closed, OSError) as e:
                st.error("ack", e)
                continue
            with st.lock:
                if r.code == rm.SUCCESS:
                    st.acked_pop.add(body)
                else:
                    st.ack_failures += 1
    conn.close()


def reader(st, addr, broker_name, group, topic, sink):
    """A raw POP consumer that acknowledges everything of `topic` and adds its bodies to
    `sink` (a set of State)."""
    conn = rm.Conn(addr)
    while not st.stop_all.is_set():
        try:
            got = rm.popped(rm.pop(conn, group, topic, invisible_ms=20000, poll_ms=1000), broker_name)
        except (rm.Timeout, rm.Closed, OSError) as e:
            st.error(f"pop {topic}", e)
            time.sleep(0.5)
            conn = rm.Conn(addr)
            continue
        for m in got:
            with st.lock:
                sink.add(m["body"].decode())
            try:
                rm.ack(conn, group, m)
            except (rm.Timeout, rm.Closed, OSError) as e:
                st.error(f"ack {topic}", e)
    conn.close()


# Outcomes of a half message of group soak_tx, by share of 100.
TX_PLAN = [("c", 40), ("r", 15), ("cc", 15), ("rc", 10), ("u", 10), ("i", 10)]


def tx_kind_of(seq):
    k = (seq * 37) % 100
    for kind, share in TX_PLAN:
        if k < share:
            return kind
        k -= share
    return "c"


def answer_checks(st, group):
    """The producer's check listener: commit cc and i, roll back rc, unknown for u."""

    def on_request(conn, req):
        if req.code != rm.CHECK_TRANSACTION_STATE:
            return
        st.bump("checks_" + group)
        try:
            m = rm.decode_messages(req.body)[0]
        except Exception as e:  # a check this driver cannot read is a finding
            st.error("check body", e)
            return
        body = m["body"].decode()
        kind = body.split(":")[1]
        decision = {"cc": rm.TRANSACTION_COMMIT, "i": rm.TRANSACTION_COMMIT, "rc": rm.TRANSACTION_ROLLBACK}.get(
            kind, rm.TRANSACTION_NOT_TYPE
        )
        if kind in ("c", "r"):
            st.bump("checks_of_decided")
        try:
            rm.end_transaction(
                conn,
                group,
                int(req.ext["tranStateTableOffset"]),
                int(req.ext["commitLogOffset"]),
                req.ext.get("msgId", ""),
                decision,
                from_check=True,
            )
        except OSError as e:
            st.error("check answer", e)

    return on_request


def send_half(st, conn, group, body, immunity=None):
    uniq = uniq_id()
    props = {"UNIQ_KEY": uniq, "TRAN_MSG": "true", "PGROUP": group, "KEYS": body, "WAIT": "true"}
    if immunity:
        props["CHECK_IMMUNITY_TIME_IN_SECONDS"] = str(immunity)
    r = rm.send(conn, group, TX_TOPIC, body.encode(), props, sys_flag=rm.TRANSACTION_PREPARED)
    if r.code != rm.SUCCESS:
        with st.lock:
            st.refused.append((TX_TOPIC, body, r.code, r.remark))
        return None
    return uniq, int(r.ext["queueOffset"]), rm.commit_log_offset(r.ext["msgId"])


def tx_producer(st, addr, rate):
    conn = rm.Conn(addr, on_request=answer_checks(st, TX_GROUP))
    client_id = f"127.0.0.1@soak_tx@{os.getpid()}"
    rm.heartbeat(conn, client_id, producer_groups=[TX_GROUP])
    last_beat = time.monotonic()

    def one(seq):
        nonlocal last_beat
        if time.monotonic() - last_beat > 20:
            rm.heartbeat(conn, client_id, producer_groups=[TX_GROUP])
            last_beat = time.monotonic()
        kind = tx_kind_of(seq)
        body = f"tx:{kind}:{seq}"
        try:
            sent = send_half(st, conn, TX_GROUP, body, immunity=60 if kind == "i" else None)
        except (rm.Timeout, rm.Closed, OSError) as e:
            st.error("half send", e)
            return
        if sent is None:
            return
        with st.lock:
            st.tx_kind[body] = kind
        uniq, qo, clo = sent
        if kind == "c":
            rm.end_transaction(conn, TX_GROUP, qo, clo, uniq, rm.TRANSACTION_COMMIT)
        elif kind == "r":
            rm.end_transaction(conn, TX_GROUP, qo, clo, uniq, rm.TRANSACTION_ROLLBACK)

    paced(st, rate, one)
    # Keep answering checks (and heartbeating) through the drain.
    while not st.stop_all.is_set():
        time.sleep(1)
        if time.monotonic() - last_beat > 20:
            try:
                rm.heartbeat(conn, client_id, producer_groups=[TX_GROUP])
            except (rm.Timeout, rm.Closed, OSError) as e:
                st.error("heartbeat", e)
            last_beat = time.monotonic()
    conn.close()


def leaving_producers(st, addr, every=60, n=20):
    """Every `every` s: a producer of soak_gone sends n half messages and disconnects."""
    round_ = 0
    while not st.stop_producers.wait(every if round_ else 5):
        conn = rm.Conn(addr)
        client_id = f"127.0.0.1@soak_gone_{round_}@{os.getpid()}"
        try:
            rm.heartbeat(conn, client_id, producer_groups=[GONE_GROUP])
            for i in range(n):
                body = f"tx:o:{round_ * n + i}"
                if send_half(st, conn, GONE_GROUP, body) is not None:
                    with st.lock:
                        st.tx_kind[body] = "o"
        except (rm.Timeout, rm.Closed, OSError) as e:
            st.error("leaving producer", e)
        conn.close()
        round_ += 1


def grpc_worker(st, args, endpoint):
    """The SimpleConsumers, in the venv's Python (the SDK's own process and threads)."""
    cmd = [
        args.python,
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "grpc_consumers.py"),
        "--endpoint",
        endpoint,
        "--topic",
        SIMPLE_TOPIC,
        "--group",
        "soak_simple",
        "--throwaway-secs",
        str(args.throwaway_secs),
    ]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=open(os.path.join(args.out, "grpc_consumers.log"), "w"), text=True)
    st.grpc_proc = p
    for line in p.stdout:
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        with st.lock:
            if ev["k"] == "r":
                st.simple_deliveries += 1
                st.received_simple.add(ev["b"])
            elif ev["k"] == "t":
                st.throwaway_groups += 1
            elif ev["k"] == "e":
                if len(st.errors) < 200:
                    st.errors.append("grpc: " + ev["e"])


LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def scrape(metrics_addr):
    """The samples of /metrics as (name, labels, value)."""
    out = []
    with urllib.request.urlopen(f"http://{metrics_addr}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("#") or not line.strip():
                continue
            series, _, value = line.rpartition(" ")
            name, _, labels = series.partition("{")
            try:
                out.append((name, dict(LABEL.findall(labels)), float(value)))
            except ValueError:
                pass
    return out


def metric_sum(m, name, **want):
    """The sum of the samples of `name` whose labels include `want`."""
    return sum(v for n, labels, v in m if n == name and all(labels.get(k) == x for k, x in want.items()))


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def read_topic(addr, topic, group="soak_audit", queues=16):
    """Every body retained in a topic's queues, read with PULL from offset 0."""
    conn = rm.Conn(addr)
    bodies = []
    codes = {}
    for q in range(queues):
        offset = 0
        while True:
            r = rm.pull(conn, group, topic, q, offset)
            codes.setdefault(q, r.code)
            if r.code != rm.SUCCESS:
                break
            msgs = rm.decode_messages(r.body)
            if not msgs:
                break
            bodies.extend(m["body"].decode("utf-8", "replace") for m in msgs)
            offset = int(r.ext.get("nextBeginOffset", offset + len(msgs)))
    conn.close()
    return bodies, codes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=20)
    ap.add_argument("--out", default="benches/results/soak")
    ap.add_argument("--binary", default="target/release/baiji")
    ap.add_argument("--python", default=".tools/py/bin/python", help="a Python with rocketmq-python-client 5.1.2")
    ap.add_argument("--pop-rate", type=float, default=200)
    ap.add_argument("--simple-rate", type=float, default=100)
    ap.add_argument("--tx-rate", type=float, default=20)
    ap.add_argument("--throwaway-secs", type=float, default=5)
    ap.add_argument("--drain-secs", type=float, default=90)
    ap.add_argument("--dlq-retention-secs", type=int, default=300,
                    help="how long %%DLQ%% and TRANS_CHECK_MAX_TIME_TOPIC keep what was read (RocketMQ's 72 h would grow them all run)")
    ap.add_argument("--flat-tolerance", type=float, default=0.15)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    port = free_port()
    ns_port = free_port()
    grpc_port = free_port()
    metrics_port = free_port()
    broker_name = "soak-a"
    addr = f"127.0.0.1:{port}"
    broker_cmd = [
        args.binary, "broker",
        "--listen", addr,
        "--fast-listen-port", "0",
        "--namesrv-listen", f"127.0.0.1:{ns_port}",
        "--grpc-listen", f"127.0.0.1:{grpc_port}",
        "--metrics-listen", f"127.0.0.1:{metrics_port}",
        "--broker-name", broker_name,
        "--memory-budget", "384m",
        "--group-idle-secs", "30",
        "--transaction-check-interval", "1000",
        "--transaction-check-max", "5",
        "--pop-retry-max-times", "2",
        "--dlq-retention-secs", str(args.dlq_retention_secs),
    ]  # fmt: skip
    log = open(os.path.join(args.out, "broker.log"), "w")
    broker = subprocess.Popen(broker_cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "RUST_LOG": "warn"})
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            socket.create_connection(("127.0.0.1", grpc_port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    else:
        sys.exit("the broker did not open its ports")

    st = State()
    st.grpc_proc = None
    threads = [
        threading.Thread(target=producer, args=(st, addr, POP_TOPIC, "p", args.pop_rate)),
        threading.Thread(target=producer, args=(st, addr, SIMPLE_TOPIC, "s", args.simple_rate)),
        threading.Thread(target=tx_producer, args=(st, addr, args.tx_rate)),
        threading.Thread(target=leaving_producers, args=(st, addr)),
        threading.Thread(target=pop_consumer, args=(st, addr, broker_name)),
        threading.Thread(target=pop_consumer, args=(st, addr, broker_name)),
        threading.Thread(target=reader, args=(st, addr, broker_name, TX_READER, TX_TOPIC, st.tx_received)),
        threading.Thread(target=reader, args=(st, addr, broker_name, "soak_dlq_reader", f"%DLQ%{POP_GROUP}", st.dlq_seen)),
        threading.Thread(target=reader, args=(st, addr, broker_name, "soak_discard_reader", CHECK_MAX_TOPIC, st.discarded_seen)),
    ]
    grpc = threading.Thread(target=grpc_worker, args=(st, args, f"127.0.0.1:{grpc_port}"), daemon=True)
    grpc.start()
    for t in threads:
        t.daemon = True
        t.start()

    duration = args.minutes * 60
    t0 = time.monotonic()
    samples = []
    limit = None
    print(f"soak: broker pid {broker.pid} on {addr}, gRPC {grpc_port}, {args.minutes} min + {args.drain_secs} s drain", flush=True)
    phase = "load"
    next_sample = t0
    while True:
        now = time.monotonic()
        elapsed = now - t0
        if phase == "load" and elapsed >= duration:
            st.stop_producers.set()
            phase = "drain"
        if phase == "drain" and elapsed >= duration + args.drain_secs:
            break
        if now < next_sample:
            time.sleep(min(1, next_sample - now))
            continue
        next_sample += 10
        if broker.poll() is not None:
            st.error("broker", f"exited with {broker.returncode}")
            break
        try:
            m = scrape(f"127.0.0.1:{metrics_port}")
        except OSError as e:
            st.error("scrape", e)
            continue
        limit = metric_sum(m, "baiji_memory_limit_bytes") or limit
        with st.lock:
            row = {
                "t": round(elapsed),
                "phase": phase,
                "rss": rss_bytes(broker.pid),
                "memory_used": int(metric_sum(m, "baiji_memory_used_bytes")),
                "subscriptions": int(metric_sum(m, "baiji_subscriptions")),
                "half_retained": int(metric_sum(m, "baiji_topic_retained_messages", topic="RMQ_SYS_TRANS_HALF_TOPIC")),
                "dlq_retained": int(metric_sum(m, "baiji_topic_retained_messages", topic=f"%DLQ%{POP_GROUP}")),
                "discard_retained": int(metric_sum(m, "baiji_topic_retained_messages", topic=CHECK_MAX_TOPIC)),
                "dlq_seen": len(st.dlq_seen),
                "discarded_seen": len(st.discarded_seen),
                "sends_refused": int(metric_sum(m, "baiji_sends_refused_total")),
                "evicted": int(metric_sum(m, "baiji_evicted_messages_total")),
                "dropped": int(metric_sum(m, "baiji_dropped_messages_total")),
                "revive_failures": int(metric_sum(m, "baiji_pop_revive_failures_total")),
                "dlq_failures": int(metric_sum(m, "baiji_dead_letter_failures_total")),
                "sent": sum(len(v) for v in st.sent.values()) + len(st.tx_kind),
                "pop_acked": len(st.acked_pop),
                "simple_received": len(st.received_simple),
                "tx_received": len(st.tx_received),
                "throwaway_groups": st.throwaway_groups,
                "refused_sends_seen": len(st.refused),
            }
        samples.append(row)
        print(
            f"[{row['t']:5d} s {phase}] rss {row['rss'] / 2**20:6.1f} MiB, used {row['memory_used'] / 2**20:6.1f} MiB, "
            f"subs {row['subscriptions']}, half {row['half_retained']}, sent {row['sent']}, acked {row['pop_acked']}, "
            f"simple {row['simple_received']}, tx {row['tx_received']}, throwaway {row['throwaway_groups']}, "
            f"refused {row['refused_sends_seen']}/{row['sends_refused']}, errors {len(st.errors)}",
            flush=True,
        )

    st.stop_all.set()
    time.sleep(2)
    dlq, dlq_codes = read_topic(addr, f"%DLQ%{POP_GROUP}", queues=1)
    discarded, discarded_codes = read_topic(addr, CHECK_MAX_TOPIC)
    if st.grpc_proc is not None:
        st.grpc_proc.send_signal(signal.SIGTERM)
        try:
            st.grpc_proc.wait(20)
        except subprocess.TimeoutExpired:
            st.grpc_proc.kill()
    broker.send_signal(signal.SIGTERM)
    try:
        broker.wait(20)
    except subprocess.TimeoutExpired:
        broker.kill()

    # --- checks ---
    checks = []

    def check(name, ok, detail):
        checks.append({"check": name, "ok": bool(ok), "detail": detail})

    dlq_set = set(dlq) | st.dlq_seen
    with st.lock:
        pop_sent = st.sent[POP_TOPIC]
        lost_pop = sorted(pop_sent - st.acked_pop - dlq_set)
        check(
            "soak_pop_topic: every answered send acknowledged or dead-lettered",
            not lost_pop,
            f"{len(pop_sent)} sent, {len(st.acked_pop & pop_sent)} acknowledged, {len(dlq_set)} dead-lettered "
            f"({len(st.failed_pop)} failed on purpose), {len(lost_pop)} missing {lost_pop[:10]}",
        )
        failing_not_dlq = sorted(st.failed_pop - dlq_set)
        check("soak_pop_topic: every message failed on purpose dead-lettered", not failing_not_dlq,
              f"{len(st.failed_pop)} failed, {len(failing_not_dlq)} not in %DLQ% {failing_not_dlq[:10]}")
        lost_simple = sorted(st.sent[SIMPLE_TOPIC] - st.received_simple)
        check("soak_simple_topic: every answered send received by the gRPC SimpleConsumers", not lost_simple,
              f"{len(st.sent[SIMPLE_TOPIC])} sent, {len(st.received_simple)} received "
              f"({st.simple_deliveries} deliveries), {len(lost_simple)} missing {lost_simple[:10]}")
        by_kind = {}
        for body, kind in st.tx_kind.items():
            by_kind.setdefault(kind, set()).add(body)
        committed = by_kind.get("c", set()) | by_kind.get("cc", set()) | by_kind.get("i", set())
        never = by_kind.get("r", set()) | by_kind.get("rc", set()) | by_kind.get("u", set()) | by_kind.get("o", set())
        lost_tx = sorted(committed - st.tx_received)
        check("transactions: every committed half message delivered", not lost_tx,
              f"{len(committed)} committed ({len(by_kind.get('i', ()))} with 60 s immunity), "
              f"{len(lost_tx)} missing {lost_tx[:10]}")
        leaked = sorted(never & st.tx_received)
        check("transactions: no rolled-back, unknown or orphaned half message delivered", not leaked,
              f"{len(never)} never to deliver, {len(leaked)} delivered {leaked[:10]}")
        disc = set(discarded) | st.discarded_seen
        expected_disc = by_kind.get("u", set()) | by_kind.get("o", set())
        not_disc = sorted(expected_disc - disc)
        check("transactions: unknown and orphaned half messages discarded to TRANS_CHECK_MAX_TIME_TOPIC",
              not not_disc,
              f"{len(by_kind.get('u', ()))} unknown, {len(by_kind.get('o', ()))} orphaned, {len(disc)} in the topic, "
              f"{len(not_disc)} not there {not_disc[:10]}")
        check("no refused send", not st.refused and all(s["sends_refused"] == 0 for s in samples),
              f"{len(st.refused)} refused answers {st.refused[:5]}")
        counts = dict(st.counts)
        errors = list(st.errors)
        ack_failures = st.ack_failures
    full = [s for s in samples if limit and s["memory_used"] >= 0.9 * limit]
    check("the memory budget never near full (< 90 %)", samples and not full,
          f"budget {limit}, highest used {max((s['memory_used'] for s in samples), default=0)}")
    load = [s for s in samples if s["phase"] == "load"]
    q = len(load) // 4
    flat = {}
    for key in ("rss", "memory_used"):
        second = load[q : 2 * q]
        last = load[3 * q :]
        if second and last:
            a = sum(s[key] for s in second) / len(second)
            b = sum(s[key] for s in last) / len(last)
            flat[key] = (a, b, b / a if a else float("inf"))
            check(f"{key} flat: last quarter's mean within {args.flat_tolerance:.0%} of the second's",
                  a and abs(b / a - 1) <= args.flat_tolerance,
                  f"second quarter {a / 2**20:.1f} MiB, last quarter {b / 2**20:.1f} MiB, ratio {b / a if a else 0:.3f}")
        else:
            check(f"{key} flat", False, "too few samples")
    end = samples[-1] if samples else {}
    check("half messages drained after the drain", end.get("half_retained", 1) == 0,
          f"{end.get('half_retained')} half messages retained at the end")

    summary = {
        "broker": " ".join(broker_cmd),
        "minutes": args.minutes,
        "drain_secs": args.drain_secs,
        "rates": {"pop": args.pop_rate, "simple": args.simple_rate, "tx": args.tx_rate},
        "checks": checks,
        "counts": counts,
        "ack_failures": ack_failures,
        "dlq_pull_codes": dlq_codes,
        "discarded_pull_codes": discarded_codes,
        "errors": errors[:50],
        "flat": flat,
        "end": end,
    }
    with open(os.path.join(args.out, "samples.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(samples[0].keys()) if samples else ["t"])
        w.writeheader()
        w.writerows(samples)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, default=str)
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(f"# Mixed soak: {args.minutes} min + {args.drain_secs} s drain\n\n")
        f.write(f"Broker: `{' '.join(broker_cmd[1:])}`\n\n")
        f.write(f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `python3 benches/soak/soak.py --minutes {args.minutes}`; "
                f"rates {args.pop_rate:g} + {args.simple_rate:g} msg/s, {args.tx_rate:g} half msg/s, a throwaway gRPC group every {args.throwaway_secs:g} s.\n\n")
        f.write("| check | result | detail |\n|---|---|---|\n")
        for c in checks:
            f.write(f"| {c['check']} | {'pass' if c['ok'] else '**FAIL**'} | {c['detail']} |\n")
        f.write(f"\nCounters: {json.dumps(counts)}; acks refused: {ack_failures}; driver errors: {len(errors)}.\n")
        if errors:
            f.write("\nFirst driver errors:\n\n" + "".join(f"- {e}\n" for e in errors[:10]))
    print()
    for c in checks:
        print(f"{'PASS' if c['ok'] else 'FAIL'}  {c['check']}: {c['detail']}")
    sys.exit(0 if all(c["ok"] for c in checks) else 1)


if __name__ == "__main__":
    main()

"""The soak's gRPC side (run by soak.py in a Python with rocketmq-python-client 5.1.2).

Two SimpleConsumers of --group receive and acknowledge everything of --topic; every
--throwaway-secs a SimpleConsumer of a new group (soak_tmp_<n>, never used again) starts,
receives once, acknowledges what it got and shuts down. One JSON object per line on stdout:
{"k": "r", "b": body} per message of --group, {"k": "t", "g": group} per throwaway group,
{"k": "e", "e": text} per error. Stops on SIGTERM.
"""

import argparse
import json
import signal
import sys
import threading
import time

from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

out_lock = threading.Lock()
stop = threading.Event()


def emit(**fields):
    with out_lock:
        sys.stdout.write(json.dumps(fields) + "\n")
        sys.stdout.flush()


def consume(config, group, topic):
    consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=5)
    consumer.startup()
    while not stop.is_set():
        try:
            for m in consumer.receive(32, 15):
                emit(k="r", b=m.body.decode("utf-8", "replace"))
                consumer.ack(m)
        except Exception as e:  # the SDK raises its own types; every failure is reported
            emit(k="e", e=f"receive {group}: {type(e).__name__}: {e}")
            time.sleep(1)
    consumer.shutdown()


def throwaways(config, topic, every):
    n = 0
    while not stop.wait(every):
        group = f"soak_tmp_{n}"
        n += 1
        try:
            c = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=1)
            c.startup()
            for m in c.receive(16, 15):
                c.ack(m)
            c.shutdown()
            emit(k="t", g=group)
        except Exception as e:
            emit(k="e", e=f"throwaway {group}: {type(e).__name__}: {e}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--endpoint", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--throwaway-secs", type=float, default=5)
    a = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    config = ClientConfiguration(a.endpoint, Credentials(), request_timeout=10)
    workers = [threading.Thread(target=consume, args=(config, a.group, a.topic)) for _ in range(2)]
    workers.append(threading.Thread(target=throwaways, args=(config, a.topic, a.throwaway_secs)))
    for w in workers:
        w.daemon = True
        w.start()
    while not stop.wait(1):
        pass
    for w in workers:
        w.join(10)


if __name__ == "__main__":
    main()

"""PushConsumer of rocketmq-python-client 5.1.2 against a baiji broker's gRPC port.

Run by tests/grpc_clients/consumer.rs. Prints one JSON object per line on stdout: one
{"kind": "consume", ...} per listener call, then {"kind": "done", ...}.

The listener fails the first --fail deliveries of every message (-1: every delivery) and
succeeds after; a message whose body is --poison always fails. The script ends --linger
seconds after --expect messages were consumed successfully, or after --seconds.
"""

import argparse
import json
import sys
import threading
import time

from rocketmq import (ClientConfiguration, ConsumeResult, Credentials, FilterExpression,
                      MessageListener, PushConsumer)

lock = threading.Lock()


def emit(**fields):
    with lock:
        print(json.dumps(fields), flush=True)


class Listener(MessageListener):
    def __init__(self, fail, poison):
        self.fail = fail
        self.poison = poison
        self.seen = {}
        self.ok = set()
        self.done = threading.Event()
        self.expect = 0

    def consume(self, message):
        with lock:
            n = self.seen.get(message.message_id, 0) + 1
            self.seen[message.message_id] = n
        body = message.body.decode("utf-8", "replace")
        failing = self.fail < 0 or n <= self.fail or (self.poison is not None and body == self.poison)
        emit(
            kind="consume",
            id=message.message_id,
            body=body,
            tag=message.tag,
            group=message.message_group,
            attempt=message.delivery_attempt,
            call=n,
            result="failure" if failing else "success",
        )
        if failing:
            return ConsumeResult.FAILURE
        with lock:
            self.ok.add(message.message_id)
            if self.expect and len(self.ok) >= self.expect:
                self.done.set()
        return ConsumeResult.SUCCESS


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--endpoint", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--mode", default="push", help="accepted for symmetry with grpc_consumer.js")
    p.add_argument("--fail", type=int, default=0)
    p.add_argument("--expect", type=int, default=0)
    p.add_argument("--seconds", type=float, default=45)
    p.add_argument("--poison", default=None)
    p.add_argument("--linger", type=float, default=0)
    a = p.parse_args()

    listener = Listener(a.fail, a.poison)
    listener.expect = a.expect
    config = ClientConfiguration(a.endpoint, Credentials(), request_timeout=5)
    consumer = PushConsumer(config, a.group, listener, {a.topic: FilterExpression()})
    consumer.startup()
    emit(kind="started")
    try:
        if listener.done.wait(a.seconds):
            time.sleep(a.linger)
    finally:
        consumer.shutdown()
    emit(kind="done", succeeded=len(listener.ok))


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001
        print(f"consumer_push.py failed: {e!r}", file=sys.stderr)
        emit(kind="error", error=repr(e))
        sys.exit(1)

"""SimpleConsumer scenarios of rocketmq-python-client 5.1.2 against a baiji broker's gRPC port.

Run by tests/grpc_clients/consumer.rs. Prints one JSON object per line on stdout (diagnostics
go to stderr); every message received is printed as {"kind": "message", ...}.

Modes:
  receive         receive --count messages (invisible --invisible s), ack each, print them;
                  then keep receiving for --linger s and print anything more (redeliveries)
  change          receive one message (invisible 30 s), change its invisible duration to
                  --invisible s, try to ack with the old handle (printed: its error code),
                  receive it again once visible, ack it with the new delivery's handle
  bad-invisible   receive with an invisible duration of --invisible s: print the error code
  acl-receive     receive once, signed with --ak/--sk: print `done` or `refused` with its code
"""

import argparse
import json
import sys
import time

from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer


def emit(**fields):
    print(json.dumps(fields), flush=True)


def describe(m):
    return {
        "kind": "message",
        "id": m.message_id,
        "topic": m.topic,
        "body": m.body.decode("utf-8", "replace"),
        "tag": m.tag,
        "keys": sorted(m.keys or []),
        "properties": dict(m.properties or {}),
        "attempt": m.delivery_attempt,
        "group": m.message_group,
        "handle": m.receipt_handle,
    }


def code_of(e):
    return getattr(e, "code", None)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--endpoint", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--mode", default="receive")
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--invisible", type=int, default=30)
    p.add_argument("--tag", default="*")
    p.add_argument("--patience", type=float, default=45)
    p.add_argument("--linger", type=float, default=0)
    p.add_argument("--ak", default="")
    p.add_argument("--sk", default="")
    a = p.parse_args()

    config = ClientConfiguration(a.endpoint, Credentials(a.ak, a.sk), request_timeout=5)
    consumer = SimpleConsumer(config, a.group, {a.topic: FilterExpression(a.tag)}, await_duration=5)
    consumer.startup()
    deadline = time.time() + a.patience
    try:
        if a.mode == "receive":
            got = 0
            while got < a.count and time.time() < deadline:
                for m in consumer.receive(32, a.invisible):
                    emit(**describe(m))
                    consumer.ack(m)
                    got += 1
            extra = 0
            until = time.time() + a.linger
            while time.time() < until:
                for m in consumer.receive(32, a.invisible):
                    emit(**describe(m))
                    consumer.ack(m)
                    extra += 1
            emit(kind="done", received=got, extra=extra)
        elif a.mode == "change":
            first = None
            while first is None and time.time() < deadline:
                msgs = consumer.receive(1, 30)
                first = msgs[0] if msgs else None
            if first is None:
                emit(kind="error", error="nothing received")
                return
            emit(**describe(first))
            old = first.receipt_handle
            consumer.change_invisible_duration(first, a.invisible)
            changed_at = time.time()
            emit(kind="changed", new_handle=first.receipt_handle, differs=first.receipt_handle != old)
            first.receipt_handle = old
            try:
                consumer.ack(first)
                emit(kind="old_ack", code=None)
            except Exception as e:  # noqa: BLE001 - the client raises its own hierarchy
                emit(kind="old_ack", code=code_of(e), error=str(e))
            again = None
            while again is None and time.time() < deadline:
                for m in consumer.receive(1, 30):
                    again = m
            if again is None:
                emit(kind="error", error="not redelivered")
                return
            emit(**describe(again))
            emit(kind="redelivered", after_s=time.time() - changed_at)
            consumer.ack(again)
            emit(kind="done", acked=True)
        elif a.mode == "bad-invisible":
            try:
                consumer.receive(1, a.invisible)
                emit(kind="done", code=None)
            except Exception as e:  # noqa: BLE001
                emit(kind="done", code=code_of(e), error=str(e))
        elif a.mode == "hold":
            # Receives once (its Settings are then in force), says so, and stays until killed.
            consumer.receive(1, a.invisible)
            emit(kind="started")
            time.sleep(a.linger)
        elif a.mode == "acl-receive":
            try:
                got = consumer.receive(1, a.invisible)
                emit(kind="done", received=len(got))
            except Exception as e:  # noqa: BLE001
                emit(kind="refused", code=code_of(e), error=str(e))
        else:
            raise SystemExit("unknown mode " + a.mode)
    finally:
        consumer.shutdown()


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001
        print(f"consumer_simple.py failed: {e!r}", file=sys.stderr)
        emit(kind="error", error=repr(e))
        sys.exit(1)

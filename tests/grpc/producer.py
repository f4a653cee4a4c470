"""RocketMQ 5 Python SDK (rocketmq-python-client 5.1.2) producers against baiji's gRPC face.

Spawned by tests/grpc_clients/producer.rs: `producer.py MODE ENDPOINT TOPIC [ARGS]`. Prints one
JSON object per line (what it sent, what the broker answered); the Rust test asserts on them and
on what a remoting consumer reads. Exits non-zero on any unexpected failure.
"""

import json
import os
import sys
import threading
import time

from rocketmq import (ClientConfiguration, Credentials, Message, Producer,
                      TransactionChecker, TransactionResolution)


def emit(**fields):
    print(json.dumps(fields), flush=True)


class Checker(TransactionChecker):
    """Commits what the broker asks about, and remembers that it was asked."""

    def __init__(self):
        self.checked = []
        self.event = threading.Event()

    def check(self, message):
        self.checked.append(message.message_id)
        self.event.set()
        return TransactionResolution.COMMIT


def producer(endpoint, topic, checker=None, tls=False, credentials=None):
    config = ClientConfiguration(endpoint, credentials or Credentials())
    p = Producer(config, (topic,), checker, tls_enable=tls)
    p.startup()
    return p


def message(topic, body, tag=None, keys=None, props=None, group=None, deliver_at=None):
    m = Message()
    m.topic = topic
    m.body = body.encode()
    if tag:
        m.tag = tag
    for k in keys or ():
        m.keys = k  # the setter adds one key per assignment
    for k, v in (props or {}).items():
        m.add_property(k, v)
    if group:
        m.message_group = group
    if deliver_at:
        m.delivery_timestamp = deliver_at
    return m


def normal(endpoint, topic, count, tls=False):
    p = producer(endpoint, topic, tls=tls)
    for i in range(int(count)):
        keys = [f"key-{i}", f"other-{i}"]
        props = {"color": f"red-{i}", "size": str(i)}
        r = p.send(message(topic, f"py-normal-{i}", "TagA", keys, props))
        emit(kind="sent", message_id=r.message_id, body=f"py-normal-{i}", tag="TagA",
             keys=keys, props=props)
    p.shutdown()


def tls_normal(endpoint, topic, count, roots):
    """`normal` over TLS (the SDK's secure channel), trusting the certificates in `roots`."""
    os.environ["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = roots
    normal(endpoint, topic, count, tls=True)


def fifo(endpoint, topic, groups, count):
    p = producer(endpoint, topic)
    for i in range(int(count)):
        for g in range(int(groups)):
            body = f"py-fifo-{g}-{i}"
            r = p.send(message(topic, body, group=f"group-{g}"))
            emit(kind="sent", message_id=r.message_id, body=body, group=f"group-{g}", seq=i)
    p.shutdown()


def delay(endpoint, topic, secs):
    p = producer(endpoint, topic)
    due = int(time.time()) + int(secs)
    r = p.send(message(topic, "py-delay", deliver_at=due))
    emit(kind="sent", message_id=r.message_id, body="py-delay", due_ms=due * 1000)
    p.shutdown()


def recall(endpoint, topic, secs):
    """Two delay messages due in `secs` s, the first recalled with its receipt's handle; then
    a recall with a malformed handle, which the SDK raises."""
    p = producer(endpoint, topic)
    due = int(time.time()) + int(secs)
    for body, at in (("py-recalled", due), ("py-kept", due + 1)):
        r = p.send(message(topic, body, deliver_at=at))
        emit(kind="sent", message_id=r.message_id, body=body, recall_handle=r.recall_handle)
        if body == "py-recalled":
            emit(kind="recalled", message_id=p.recall_message(topic, r.recall_handle))
    try:
        p.recall_message(topic, "not-a-handle")
        emit(kind="refused", error=None)
    except Exception as e:  # the SDK's ClientException: "<code>, <message>"
        emit(kind="refused", error=str(e))
    p.shutdown()


def tx(endpoint, topic):
    p = producer(endpoint, topic, Checker())
    for body, decide in (("py-tx-commit", "commit"), ("py-tx-rollback", "rollback")):
        t = p.begin_transaction()
        r = p.send(message(topic, body), t)
        emit(kind="half", message_id=r.message_id, transaction_id=r.transaction_id, body=body)
        t.commit() if decide == "commit" else t.rollback()
        emit(kind=decide, message_id=r.message_id)
    p.shutdown()


def orphan(endpoint, topic, wait_secs):
    checker = Checker()
    p = producer(endpoint, topic, checker)
    t = p.begin_transaction()
    r = p.send(message(topic, "py-tx-orphan"), t)
    emit(kind="half", message_id=r.message_id, transaction_id=r.transaction_id, body="py-tx-orphan")
    # Left undecided: the broker's checker must ask this producer over Telemetry.
    if not checker.event.wait(float(wait_secs)):
        emit(kind="error", error="the broker never asked about the orphaned transaction")
        p.shutdown()
        sys.exit(1)
    emit(kind="checked", message_id=checker.checked[0])
    time.sleep(2)  # the checker's EndTransaction goes out on another thread
    p.shutdown()


def raw(endpoint, topic, unknown_topic, body_size):
    """Direct gRPC calls (no SDK checks in between) with bad input, each followed by a good one."""
    import grpc
    from rocketmq.grpc_protocol import MessagingServiceStub
    from rocketmq.grpc_protocol.definition_pb2 import Message as PbMessage
    from rocketmq.grpc_protocol.definition_pb2 import MessageType, Resource
    from rocketmq.grpc_protocol.service_pb2 import QueryRouteRequest, SendMessageRequest

    stub = MessagingServiceStub(grpc.insecure_channel(endpoint, options=[
        ("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]))
    with_id = [("x-mq-client-id", "raw-python-client")]

    def send(t, body, metadata):
        m = PbMessage()
        m.topic.name = t
        m.body = body
        m.system_properties.message_id = f"raw-{time.time_ns()}"
        m.system_properties.message_type = MessageType.NORMAL
        return stub.SendMessage(SendMessageRequest(messages=[m]), metadata=metadata, timeout=10)

    r = stub.QueryRoute(QueryRouteRequest(topic=Resource(name=topic)), timeout=10)
    emit(kind="route_without_client_id", code=r.status.code)
    r = send(topic, b"no-id", [])
    emit(kind="send_without_client_id", code=r.status.code)
    r = stub.QueryRoute(QueryRouteRequest(topic=Resource(name=unknown_topic)), metadata=with_id, timeout=10)
    emit(kind="route_unknown_topic", code=r.status.code)
    r = send(unknown_topic, b"nowhere", with_id)
    emit(kind="send_unknown_topic", code=r.status.code,
         entry_codes=[e.status.code for e in r.entries])
    r = send(topic, b"x" * int(body_size), with_id)
    emit(kind="send_oversized", code=r.status.code,
         entry_codes=[e.status.code for e in r.entries])
    r = send(topic, b"", with_id)
    emit(kind="send_empty", code=r.status.code)
    r = send(topic, b"still-served", with_id)
    emit(kind="send_good", code=r.status.code, message_id=r.entries[0].message_id)
    r = stub.QueryRoute(QueryRouteRequest(topic=Resource(name=topic)), metadata=with_id, timeout=10)
    emit(kind="route_good", code=r.status.code, queues=len(r.message_queues),
         types=sorted(set(t for q in r.message_queues for t in q.accept_message_types)),
         endpoint=[f"{a.host}:{a.port}" for a in r.message_queues[0].broker.endpoints.addresses])
    # Last: fill the broker's memory budget until it refuses, then check it still answers.
    codes = []
    for _ in range(10000):
        r = send(topic, b"f" * (int(body_size) // 2), with_id)
        codes.append(r.status.code)
        if r.status.code != 20000:
            break
    emit(kind="send_until_full", accepted=len(codes) - 1, code=codes[-1])
    r = stub.QueryRoute(QueryRouteRequest(topic=Resource(name=topic)), metadata=with_id, timeout=10)
    emit(kind="route_after_full", code=r.status.code)


def hold(endpoint, topic, secs):
    """Starts a producer (its Telemetry stream open), says so, and stays until killed."""
    p = producer(endpoint, topic)
    p.send(message(topic, "py-hold"))
    emit(kind="started")
    time.sleep(float(secs))
    p.shutdown()


def hold_until(endpoint, topic, stop_file):
    """Starts a producer, says so, and shuts it down (NotifyClientTermination) once
    `stop_file` exists."""
    p = producer(endpoint, topic)
    p.send(message(topic, "py-hold"))
    emit(kind="started")
    while not os.path.exists(stop_file):
        time.sleep(0.1)
    p.shutdown()
    emit(kind="done")


def acl_send(endpoint, topic, ak, sk):
    """Sends one message signed as account `ak` with secret `sk` (the SDK's MQv2-HMAC-SHA1
    metadata): prints `sent`, or `refused` with the code the broker answered."""
    p = producer(endpoint, topic, credentials=Credentials(ak, sk))
    try:
        r = p.send(message(topic, "py-acl"))
        emit(kind="sent", message_id=r.message_id)
    except Exception as e:  # noqa: BLE001 - the refusal is what the test looks at
        # A refused route query reaches the caller as "failed to fetch topic route", without
        # its code: the route is asked again with the SDK's own signed metadata (`sign()`).
        emit(kind="refused", code=getattr(e, "code", None), route_code=route_code(p, endpoint, topic),
             error=str(e))
    finally:
        p.shutdown()


def route_code(p, endpoint, topic):
    """The status code of a QueryRoute sent with the metadata `p` signs its calls with."""
    import grpc
    from rocketmq.grpc_protocol import MessagingServiceStub
    from rocketmq.grpc_protocol.definition_pb2 import Resource
    from rocketmq.grpc_protocol.service_pb2 import QueryRouteRequest

    stub = MessagingServiceStub(grpc.insecure_channel(endpoint))
    r = stub.QueryRoute(QueryRouteRequest(topic=Resource(name=topic)), metadata=p.sign(), timeout=10)
    return r.status.code


MODES = {"acl_send": acl_send, "hold": hold, "hold_until": hold_until, "normal": normal, "tls_normal": tls_normal, "fifo": fifo, "delay": delay, "recall": recall, "tx": tx, "orphan": orphan, "raw": raw}

if __name__ == "__main__":
    try:
        MODES[sys.argv[1]](*sys.argv[2:])
    except Exception as e:  # noqa: BLE001 - reported to the test, which fails on it
        emit(kind="error", error=f"{type(e).__name__}: {e}")
        sys.exit(1)

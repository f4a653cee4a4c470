"""Consumer RPCs sent one by one with the gRPC stubs of rocketmq-python-client 5.1.2, to see the
Code baiji answers to bad input (which the SDK's own consumers never send, or hide).

Run by tests/grpc_clients/consumer.rs once the topic holds exactly one message. Announces the
consumer group with a Telemetry Settings first, as every SDK does. Prints one JSON object per
line on stdout: {"case": ..., "code": ..., ...}.
"""

import argparse
import json
import sys
import uuid

import grpc
from google.protobuf.duration_pb2 import Duration

from rocketmq.grpc_protocol import (AckMessageEntry, AckMessageRequest,
                                    ChangeInvisibleDurationRequest, ClientType,
                                    MessagingServiceStub, QueryAssignmentRequest,
                                    ReceiveMessageRequest, Settings, TelemetryCommand)
from rocketmq.grpc_protocol.definition_pb2 import FilterExpression, FilterType, MessageQueue


def emit(**fields):
    print(json.dumps(fields), flush=True)


def duration(seconds):
    return Duration(seconds=int(seconds), nanos=int((seconds % 1) * 1e9))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--endpoint", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    a = p.parse_args()

    channel = grpc.insecure_channel(a.endpoint)
    stub = MessagingServiceStub(channel)
    md = [("x-mq-client-id", "raw-" + uuid.uuid4().hex), ("x-mq-language", "PYTHON")]

    settings = Settings(client_type=ClientType.SIMPLE_CONSUMER)
    settings.subscription.group.name = a.group
    sub = settings.subscription.subscriptions.add()
    sub.topic.name = a.topic
    sub.expression.type = FilterType.TAG
    sub.expression.expression = "*"
    replies = stub.Telemetry(iter([TelemetryCommand(settings=settings)]), metadata=md, timeout=10)
    first = next(replies)
    emit(kind="settings", code=first.status.code)

    def receive(topic=None, invisible=30, poll=None, auto_renew=False, metadata=md, timeout=30,
                group=None, sql=None):
        req = ReceiveMessageRequest(batch_size=32, auto_renew=auto_renew)
        req.group.name = group or a.group
        req.message_queue.CopyFrom(MessageQueue(id=0))
        req.message_queue.topic.name = topic or a.topic
        if sql is None:
            req.filter_expression.CopyFrom(FilterExpression(type=FilterType.TAG, expression="*"))
        else:
            req.filter_expression.CopyFrom(FilterExpression(type=FilterType.SQL, expression=sql))
        if invisible is not None:
            req.invisible_duration.CopyFrom(duration(invisible))
        if poll is not None:
            req.long_polling_timeout.CopyFrom(duration(poll))
        statuses, messages, stamps = [], [], 0
        for r in stub.ReceiveMessage(req, metadata=metadata, timeout=timeout):
            kind = r.WhichOneof("content")
            if kind == "status":
                statuses.append(r.status.code)
            elif kind == "message":
                messages.append(r.message)
            elif kind == "delivery_timestamp":
                stamps += 1
        return statuses, messages, stamps

    def ack(handle, message_id="x"):
        req = AckMessageRequest(entries=[AckMessageEntry(message_id=message_id, receipt_handle=handle)])
        req.group.name = a.group
        req.topic.name = a.topic
        r = stub.AckMessage(req, metadata=md, timeout=10)
        return r.status.code, [e.status.code for e in r.entries]

    def change(handle, seconds):
        req = ChangeInvisibleDurationRequest(receipt_handle=handle, message_id="x")
        req.group.name = a.group
        req.topic.name = a.topic
        req.invisible_duration.CopyFrom(duration(seconds))
        r = stub.ChangeInvisibleDuration(req, metadata=md, timeout=10)
        return r.status.code, r.receipt_handle

    st, _, _ = receive(metadata=[("x-mq-language", "PYTHON")], poll=5)
    emit(kind="receive_without_client_id", codes=st)
    st, msgs, _ = receive(topic="no_such_topic_" + uuid.uuid4().hex[:8], poll=5)
    emit(kind="receive_unknown_topic", codes=st, messages=len(msgs))
    st, msgs, _ = receive(group="never_announced_" + uuid.uuid4().hex[:8], poll=5)
    emit(kind="receive_unknown_group", codes=st, messages=len(msgs))
    st, msgs, _ = receive(sql="color = ", poll=5)
    emit(kind="receive_bad_sql", codes=st, messages=len(msgs))
    st, msgs, _ = receive(invisible=5, poll=5)
    emit(kind="receive_invisible_5s", codes=st, messages=len(msgs))
    st, msgs, _ = receive(invisible=None, poll=5)
    emit(kind="receive_without_invisible", codes=st, messages=len(msgs))
    st, msgs, _ = receive(poll=None, timeout=3)
    emit(kind="receive_deadline_3s", codes=st, messages=len(msgs))

    st, msgs, stamps = receive(poll=5)
    handle = msgs[0].system_properties.receipt_handle if msgs else ""
    emit(kind="receive", codes=st, messages=len(msgs), stamps=stamps,
         attempt=msgs[0].system_properties.delivery_attempt if msgs else None)

    emit(kind="ack_garbage", code=ack("not-a-handle")[0])
    code, new = change(handle, 1)
    emit(kind="change", code=code, differs=bool(new) and new != handle)
    emit(kind="ack_old_handle", code=ack(handle)[0])
    emit(kind="change_old_handle", code=change(handle, 1)[0])
    code, entries = ack(new)
    emit(kind="ack_new_handle", code=code, entries=entries)

    req = QueryAssignmentRequest()
    req.topic.name = a.topic
    req.group.name = a.group
    r = stub.QueryAssignment(req, metadata=md, timeout=10)
    emit(kind="query_assignment", code=r.status.code,
         ids=[x.message_queue.id for x in r.assignments])

    st, msgs, stamps = receive(poll=5)
    emit(kind="receive_after_ack", codes=st, messages=len(msgs), stamps=stamps)
    channel.close()


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001
        print(f"consumer_raw.py failed: {e!r}", file=sys.stderr)
        emit(kind="error", error=repr(e))
        sys.exit(1)

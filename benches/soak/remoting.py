"""A minimal RocketMQ remoting client for the soak: frames, JSON headers, message bodies.

Only the standard library. One `Conn` is one TCP connection with a reader thread: responses
go to the caller waiting on their opaque, requests the broker sends (CHECK_TRANSACTION_STATE)
go to the connection's `on_request` callback.
"""

import json
import socket
import struct
import threading
import time
import zlib

SEND_MESSAGE_V2 = 310
END_TRANSACTION = 37
CHECK_TRANSACTION_STATE = 39
HEART_BEAT = 34
PULL_MESSAGE = 11
POP_MESSAGE = 200050
ACK_MESSAGE = 200051

SUCCESS = 0
PULL_NOT_FOUND = 19

TRANSACTION_PREPARED = 0x4
TRANSACTION_COMMIT = 0x8
TRANSACTION_ROLLBACK = 0xC
TRANSACTION_NOT_TYPE = 0x0

MAGIC_V1 = 0xDAA320A7
MAGIC_V2 = 0xDAA320AB


class Timeout(Exception):
    """No answer within the caller's patience."""


class Closed(Exception):
    """The connection is gone."""


def encode_properties(props):
    return "".join(f"{k}\x01{v}\x02" for k, v in props.items())


def decode_properties(text):
    out = {}
    for pair in text.split("\x02"):
        if "\x01" in pair:
            k, v = pair.split("\x01", 1)
            out[k] = v
    return out


def decode_messages(body):
    """The records of a pull or pop body (RocketMQ's MessageDecoder.decodes)."""
    out = []
    pos = 0
    while pos + 8 <= len(body):
        (size,) = struct.unpack_from(">i", body, pos)
        end = pos + size
        p = pos + 4
        magic, _crc, queue_id, flag, queue_offset, phys, sys_flag, born = struct.unpack_from(
            ">IiiiqqIq", body, p
        )
        p += 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8
        p += 20 if sys_flag & (1 << 4) else 8
        (store_ts,) = struct.unpack_from(">q", body, p)
        p += 8
        p += 20 if sys_flag & (1 << 5) else 8
        reconsume, _prepared, body_len = struct.unpack_from(">iqi", body, p)
        p += 16
        payload = body[p : p + body_len]
        p += body_len
        if sys_flag & 0x1:
            payload = zlib.decompress(payload)
        if magic == MAGIC_V2:
            (tlen,) = struct.unpack_from(">H", body, p)
            p += 2
        else:
            tlen = body[p]
            p += 1
        topic = body[p : p + tlen].decode()
        p += tlen
        (plen,) = struct.unpack_from(">H", body, p)
        p += 2
        props = decode_properties(body[p : p + plen].decode("utf-8", "replace"))
        out.append(
            {
                "queue_id": queue_id,
                "flag": flag,
                "queue_offset": queue_offset,
                "sys_flag": sys_flag,
                "born": born,
                "stored": store_ts,
                "reconsume": reconsume,
                "body": bytes(payload),
                "topic": topic,
                "props": props,
            }
        )
        pos = end
    return out


class Response:
    def __init__(self, header, body):
        self.code = header.get("code")
        self.remark = header.get("remark")
        self.ext = header.get("extFields") or {}
        self.body = body
        self.opaque = header.get("opaque")
        self.flag = header.get("flag", 0)


class Conn:
    """One remoting connection with a reader thread."""

    def __init__(self, addr, on_request=None):
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.sock.settimeout(None)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.lock = threading.Lock()
        self.waiting = {}
        self.opaque = 0
        self.on_request = on_request
        self.closed = False
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def close(self):
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def _recv_exact(self, n):
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise Closed()
            buf += chunk
        return bytes(buf)

    def _read(self):
        try:
            while True:
                (total,) = struct.unpack(">i", self._recv_exact(4))
                frame = self._recv_exact(total)
                (hl,) = struct.unpack_from(">I", frame, 0)
                hl &= 0xFFFFFF
                header = json.loads(frame[4 : 4 + hl])
                body = frame[4 + hl :]
                r = Response(header, body)
                if r.flag & 1:
                    with self.lock:
                        slot = self.waiting.pop(r.opaque, None)
                    if slot is not None:
                        slot[1] = r
                        slot[0].set()
                elif self.on_request is not None:
                    self.on_request(self, r)
        except (Closed, OSError, ValueError):
            pass
        finally:
            self.closed = True
            with self.lock:
                slots = list(self.waiting.values())
                self.waiting.clear()
            for s in slots:
                s[0].set()

    def _frame(self, code, ext, body, oneway, opaque):
        header = {
            "code": code,
            "language": "JAVA",
            "version": 453,
            "opaque": opaque,
            "flag": 2 if oneway else 0,
            "extFields": {k: str(v) for k, v in ext.items()},
            "serializeTypeCurrentRPC": "JSON",
        }
        h = json.dumps(header, separators=(",", ":")).encode()
        return struct.pack(">iI", 4 + len(h) + len(body), len(h)) + h + body

    def call(self, code, ext, body=b"", timeout=10.0):
        ev = threading.Event()
        slot = [ev, None]
        with self.lock:
            if self.closed:
                raise Closed()
            self.opaque += 1
            opaque = self.opaque
            self.waiting[opaque] = slot
        data = self._frame(code, ext, body, False, opaque)
        with self.lock:
            self.sock.sendall(data)
        if not ev.wait(timeout):
            with self.lock:
                self.waiting.pop(opaque, None)
            raise Timeout(f"code {code}: no answer in {timeout} s")
        if slot[1] is None:
            raise Closed()
        return slot[1]

    def oneway(self, code, ext, body=b""):
        with self.lock:
            self.opaque += 1
            data = self._frame(code, ext, body, True, self.opaque)
            self.sock.sendall(data)


def send(conn, group, topic, body, props, sys_flag=0, queue_id=-1, timeout=10.0):
    """SEND_MESSAGE_V2 as the Java client encodes it; queue -1 lets the broker choose."""
    ext = {
        "a": group,
        "b": topic,
        "c": "TBW102",
        "d": 4,
        "e": max(queue_id, 0),
        "f": sys_flag,
        "g": int(time.time() * 1000),
        "h": 0,
        "i": encode_properties(props),
        "j": 0,
        "k": "false",
        "m": "false",
    }
    return conn.call(SEND_MESSAGE_V2, ext, body, timeout)


def heartbeat(conn, client_id, producer_groups=(), consumer_groups=()):
    data = {
        "clientID": client_id,
        "producerDataSet": [{"groupName": g} for g in producer_groups],
        "consumerDataSet": [
            {
                "groupName": g,
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "subscriptionDataSet": [
                    {
                        "classFilterMode": False,
                        "topic": t,
                        "subString": "*",
                        "tagsSet": [],
                        "codeSet": [],
                        "subVersion": int(time.time() * 1000),
                        "expressionType": "TAG",
                    }
                    for t in topics
                ],
                "unitMode": False,
            }
            for g, topics in consumer_groups
        ],
    }
    return conn.call(HEART_BEAT, {}, json.dumps(data).encode())


def pop(conn, group, topic, max_msgs=32, invisible_ms=5000, poll_ms=1000):
    ext = {
        "consumerGroup": group,
        "topic": topic,
        "queueId": -1,
        "maxMsgNums": max_msgs,
        "invisibleTime": invisible_ms,
        "pollTime": poll_ms,
        "bornTime": int(time.time() * 1000),
        "initMode": 0,
        "expType": "TAG",
        "exp": "*",
        "order": "false",
    }
    return conn.call(POP_MESSAGE, ext, timeout=poll_ms / 1000 + 10)


def popped(r, broker_name):
    """The messages of a pop answer, each with the extraInfo (POP_CK) a client builds."""
    if r.code != SUCCESS or not r.body:
        return []
    starts = {}
    for e in (r.ext.get("startOffsetInfo") or "").split(";"):
        f = e.split(" ")
        if len(f) == 3:
            starts[(f[0], f[1])] = f[2]
    out = []
    for m in decode_messages(r.body):
        flag = "1" if m["topic"].startswith("%RETRY%") else "0"
        start = starts.get((flag, str(m["queue_id"])), "0")
        m["extra_info"] = " ".join(
            [
                start,
                str(r.ext.get("popTime")),
                str(r.ext.get("invisibleTime")),
                str(r.ext.get("reviveQid")),
                flag,
                broker_name,
                str(m["queue_id"]),
                str(m["queue_offset"]),
            ]
        )
        out.append(m)
    return out


def ack(conn, group, m):
    ext = {
        "consumerGroup": group,
        "topic": m["topic"],
        "queueId": m["queue_id"],
        "extraInfo": m["extra_info"],
        "offset": m["queue_offset"],
    }
    return conn.call(ACK_MESSAGE, ext)


def pull(conn, group, topic, queue_id, offset, max_msgs=32):
    ext = {
        "consumerGroup": group,
        "topic": topic,
        "queueId": queue_id,
        "queueOffset": offset,
        "maxMsgNums": max_msgs,
        "sysFlag": 4,  # FLAG_SUBSCRIPTION: the subscription is this request's, no heartbeat
        "commitOffset": 0,
        "suspendTimeoutMillis": 0,
        "subscription": "*",
        "subVersion": 0,
        "expressionType": "TAG",
    }
    return conn.call(PULL_MESSAGE, ext)


def end_transaction(conn, group, tran_offset, commit_log_offset, uniq, decision, from_check=False):
    """END_TRANSACTION one-way, as DefaultMQProducerImpl.endTransaction (or the check's answer)
    builds it: the half's queue offset and the commit-log offset from its offset msgId."""
    ext = {
        "producerGroup": group,
        "tranStateTableOffset": tran_offset,
        "commitLogOffset": commit_log_offset,
        "commitOrRollback": decision,
        "fromTransactionCheck": "true" if from_check else "false",
        "msgId": uniq,
        "transactionId": uniq,
    }
    conn.oneway(END_TRANSACTION, ext)


def commit_log_offset(offset_msg_id):
    """The commit-log offset an offset msgId (ip 4, port 4, offset 8; hex) carries."""
    return int(offset_msg_id[16:32], 16)

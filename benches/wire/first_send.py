#!/usr/bin/env python3
"""Times a broker's start to its first answered send: starts the command after `--`, connects
to ADDR as soon as it accepts, sends one SEND_MESSAGE_V2 (RocketMQ remoting, code 310, JSON
header) to TOPIC queue 0 and waits for its answer. Prints "<ms> <pid> <code>" and leaves the
broker running (the caller stops it). Used by shm_vs_heap.sh for the recovery times.

Usage: first_send.py ADDR TOPIC -- broker command...
"""

import json
import socket
import struct
import subprocess
import sys
import time


def frame(code, ext, body, opaque=1):
    header = json.dumps(
        {"code": code, "language": "JAVA", "version": 399, "opaque": opaque, "flag": 0,
         "extFields": ext},
        separators=(",", ":"),
    ).encode()
    return struct.pack(">II", 4 + len(header) + len(body), len(header)) + header + body


def read_frame(sock):
    def exact(n):
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return buf

    (length,) = struct.unpack(">I", exact(4))
    data = exact(length)
    (hlen,) = struct.unpack(">I", data[:4])
    return json.loads(data[4 : 4 + (hlen & 0xFFFFFF)])


def main():
    addr, topic = sys.argv[1], sys.argv[2]
    cmd = sys.argv[sys.argv.index("--") + 1 :]
    host, port = addr.rsplit(":", 1)
    start = time.monotonic()
    # The broker logs to stdout: both go to our stderr (the caller keeps it as its log).
    proc = subprocess.Popen(cmd, stdout=sys.stderr, stderr=sys.stderr)
    deadline = start + 120
    while True:
        try:
            sock = socket.create_connection((host, int(port)), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                print(f"-1 {proc.pid} no-listener", flush=True)
                return 1
            time.sleep(0.002)
    ext = {
        "a": "first_send_pg", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0",
        "g": str(int(time.time() * 1000)), "h": "0", "i": "", "j": "0", "k": "false",
    }
    sock.sendall(frame(310, ext, b"first send after a restart"))
    answer = read_frame(sock)
    ms = (time.monotonic() - start) * 1000
    print(f"{ms:.0f} {proc.pid} {answer.get('code')}", flush=True)
    return 0 if answer.get("code") == 0 else 2


if __name__ == "__main__":
    sys.exit(main())

"""pyzmq SUB receive loop for KV events: the reference for bench/kvrx.

Usage: sub.py ENDPOINT COUNT [decode]

ENDPOINT may name port * (tcp://127.0.0.1:*): the kernel chooses a free port,
and once bound the script writes "bound endpoint=tcp://127.0.0.1:PORT" (the
socket's LAST_ENDPOINT) on stderr; bench/run.sh reads the port from it.

Binds a SUB socket (libzmq through pyzmq) on ENDPOINT subscribed to every
topic, so that a publisher connects to it, receives COUNT messages with
sock.recv_multipart() and nothing else (no decode, no sequence check), and
prints one JSON line: msgs/s from the first to the last message, and the
process's CPU time per message over that span (every thread). With
"decode", each payload is also decoded with msgpack.unpackb, as a Python
consumer of vLLM's KV events does (no validation, no sequence check).
"""
import json
import sys
import time

import msgpack
import zmq


def main():
    endpoint, count = sys.argv[1], int(sys.argv[2])
    decode = len(sys.argv) > 3 and sys.argv[3] == "decode"
    ctx = zmq.Context()
    sock = ctx.socket(zmq.SUB)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.bind(endpoint)
    print("bound endpoint=%s" % sock.getsockopt_string(zmq.LAST_ENDPOINT), file=sys.stderr, flush=True)
    recv = sock.recv_multipart
    if decode:
        def recv():
            frames = sock.recv_multipart()
            msgpack.unpackb(frames[2])
    recv()
    first, cpu0 = time.perf_counter(), time.process_time()
    for _ in range(count - 1):
        recv()
    last, cpu1 = time.perf_counter(), time.process_time()
    sock.close()
    ctx.term()
    span = last - first
    print(json.dumps({
        "program": "sub.py",
        "decode": decode,
        "messages": count,
        "seconds": span,
        "msgs_per_sec": (count - 1) / span if span > 0 else 0,
        "cpu_ns_per_msg": (cpu1 - cpu0) * 1e9 / (count - 1),
        "pyzmq": zmq.__version__,
        "libzmq": zmq.zmq_version(),
    }), flush=True)


if __name__ == "__main__":
    main()

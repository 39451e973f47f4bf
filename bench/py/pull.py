"""pyzmq PULL receive loop: the reference a Go receiver is compared with.

Usage: pull.py ENDPOINT COUNT [multipart]

ENDPOINT may name port * (tcp://127.0.0.1:*): the kernel chooses a free port,
and once bound the script writes "bound endpoint=tcp://127.0.0.1:PORT" (the
socket's LAST_ENDPOINT) on stderr; bench/run.sh reads the port from it.

Binds a PULL socket (libzmq through pyzmq) on ENDPOINT, receives COUNT
messages with sock.recv() and nothing else (no decode), and prints one JSON
line: msgs/s from the first to the last message, and the process's CPU
time per message over that span (every thread: Python's and libzmq's I/O
thread; python_thread_ns_per_msg is the Python thread's share). Python's
time between recv() calls is part of what is measured, as in any Python
receive loop. With "multipart", each message is read with
sock.recv_multipart() (all its frames, still no decode). With the
environment variable PULL_CURVE_SECRET naming a server certificate
(NAME.key_secret), the socket is a CURVE server with that key pair (no ZAP
handler: libzmq then admits any client key).
"""
import os
import json
import sys
import time

import zmq
import zmq.auth


def main():
    endpoint, count = sys.argv[1], int(sys.argv[2])
    multipart = len(sys.argv) > 3 and sys.argv[3] == "multipart"
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    sock.setsockopt(zmq.LINGER, 0)
    if os.environ.get("PULL_CURVE_SECRET"):
        public, secret = zmq.auth.load_certificate(os.environ["PULL_CURVE_SECRET"])
        sock.curve_secretkey, sock.curve_publickey, sock.curve_server = secret, public, True
    sock.bind(endpoint)
    print("bound endpoint=%s" % sock.getsockopt_string(zmq.LAST_ENDPOINT), file=sys.stderr, flush=True)
    recv = sock.recv_multipart if multipart else sock.recv
    recv()
    first, cpu0, th0 = time.perf_counter(), time.process_time(), time.thread_time()
    for _ in range(count - 1):
        recv()
    last, cpu1, th1 = time.perf_counter(), time.process_time(), time.thread_time()
    sock.close()
    ctx.term()
    span = last - first
    print(json.dumps({
        "program": "pull.py",
        "messages": count,
        "seconds": span,
        "msgs_per_sec": (count - 1) / span if span > 0 else 0,
        "cpu_ns_per_msg": (cpu1 - cpu0) * 1e9 / (count - 1),
        "python_thread_ns_per_msg": (th1 - th0) * 1e9 / (count - 1),
        "pyzmq": zmq.__version__,
        "libzmq": zmq.zmq_version(),
    }), flush=True)


if __name__ == "__main__":
    main()

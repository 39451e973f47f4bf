"""pyzmq PULL sink for measuring a PUSH sender.

Usage: pull_sink.py ENDPOINT COUNT SIZE

ENDPOINT may name port * (tcp://127.0.0.1:*): the kernel chooses a free port,
and once bound the script writes "bound endpoint=tcp://127.0.0.1:PORT" (the
socket's LAST_ENDPOINT) on stderr; bench/run.sh reads the port from it.

Binds a PULL socket on ENDPOINT, receives COUNT messages, checks that each is
one frame of SIZE bytes (counting the ones that are not), and prints one JSON
line: msgs/s from the first to the last message and the number of
unexpected messages. The sender's rate is what arrives here.
"""
import json
import sys
import time

import zmq


def main():
    endpoint, count, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(endpoint)
    print("bound endpoint=%s" % sock.getsockopt_string(zmq.LAST_ENDPOINT), file=sys.stderr, flush=True)
    recv = sock.recv
    bad = 0
    if len(recv()) != size:
        bad += 1
    first = time.perf_counter()
    for _ in range(count - 1):
        if len(recv()) != size:
            bad += 1
    last = time.perf_counter()
    sock.close()
    ctx.term()
    span = last - first
    print(json.dumps({
        "program": "pull_sink.py",
        "messages": count,
        "unexpected": bad,
        "seconds": span,
        "msgs_per_sec": (count - 1) / span if span > 0 else 0,
    }), flush=True)


if __name__ == "__main__":
    main()

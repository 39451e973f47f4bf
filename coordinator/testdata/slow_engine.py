"""A slow DP engine (pyzmq on libzmq) under a READY flood, for the
coordinator's control-path test.

  slow_engine.py '{"back_publish": ..., "seconds": S}'

The engine is an XSUB on the coordinator's back publish socket with a
receive HWM of 1 and a small kernel receive buffer, as a busy engine that
reads its socket rarely: it subscribes, takes READY, then stops reading.
A second XSUB (any peer may connect) prints "flooding" and sends
re-subscriptions (b"\\x01") for S seconds, each of which asks the
coordinator for READY; the test wakes the engines meanwhile. The script
then prints "flooded", waits for one line on stdin, reads everything queued
for the engine until START_DP_WAVE arrives or 10 s pass, and prints one
JSON object: how many READY the engine got and the START_DP_WAVE body it
got (null if none).
"""

import json
import sys
import time

import msgpack
import zmq


def main():
    cfg = json.loads(sys.argv[1])
    ctx = zmq.Context()
    ctx.setsockopt(zmq.LINGER, 0)

    eng = ctx.socket(zmq.XSUB)
    eng.setsockopt(zmq.RCVHWM, 1)
    eng.setsockopt(zmq.RCVBUF, 2048)
    eng.connect(cfg["back_publish"])
    eng.send(b"\x01")
    if not eng.poll(15000):
        sys.stderr.write("slow_engine.py: no READY\n")
        sys.exit(1)
    eng.recv_multipart()

    flood = ctx.socket(zmq.XSUB)
    flood.setsockopt(zmq.SNDHWM, 0)
    flood.connect(cfg["back_publish"])
    time.sleep(0.2)
    print("flooding", flush=True)
    end = time.monotonic() + cfg["seconds"]
    while time.monotonic() < end:
        for _ in range(100):
            flood.send(b"\x01")
        time.sleep(0.0005)
    print("flooded", flush=True)
    sys.stdin.readline()

    readies, start = 0, None
    end = time.monotonic() + 10
    while start is None and time.monotonic() < end:
        if not eng.poll(200):
            continue
        frames = eng.recv_multipart()
        if frames == [b"READY"]:
            readies += 1
        elif len(frames) == 2 and frames[0] == b"\x02":
            start = msgpack.unpackb(frames[1], raw=False)
    print(json.dumps({"readies": readies, "start": start}), flush=True)
    eng.close()
    flood.close()
    ctx.term()


if __name__ == "__main__":
    main()

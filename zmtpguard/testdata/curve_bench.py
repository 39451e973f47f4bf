"""CURVE receive-rate comparison peer for zmtpguard's benchmarks.

usage:
  curve_bench.py push ENDPOINT SERVER_PUB CLIENT_PUB CLIENT_SEC N
      a pyzmq CURVE PUSH client sending N 100-byte messages, then waiting
      (bounded) for the receiver to take them.
  curve_bench.py pull N
      a pyzmq CURVE server PULL (no ZAP) receiving N 100-byte messages from
      a `push` subprocess; prints one JSON line with its rate and the CPU
      time of this process (its libzmq I/O thread included).
"""
import json
import os
import resource
import subprocess
import sys
import time

import zmq


def bind_port0(s, ep):
    """Binds s to ep on port 0: the kernel chooses the port (never a port
    picked by the library and retried); LAST_ENDPOINT says which."""
    s.bind(ep + ":0")
    return int(s.getsockopt_string(zmq.LAST_ENDPOINT).rsplit(":", 1)[1])

TIMEOUT_MS = 60000


def push(endpoint, server_pub, pub, sec, n):
    ctx = zmq.Context()
    s = ctx.socket(zmq.PUSH)
    s.sndhwm = 100000
    s.sndtimeo = TIMEOUT_MS
    s.linger = 20000
    s.curve_serverkey = server_pub.encode()
    s.curve_publickey = pub.encode()
    s.curve_secretkey = sec.encode()
    s.connect(endpoint)
    payload = b"p" * 100
    send = s.send
    for _ in range(n):
        send(payload)
    s.close()  # linger: flushes what is queued, bounded by 20 s
    ctx.term()
    print("ok sent", n, flush=True)


def pull(n):
    srv_pub, srv_sec = zmq.curve_keypair()
    cli_pub, cli_sec = zmq.curve_keypair()
    ctx = zmq.Context()
    s = ctx.socket(zmq.PULL)
    s.rcvhwm = 100000
    s.rcvtimeo = TIMEOUT_MS
    s.curve_server = True
    s.curve_secretkey = srv_sec
    port = bind_port0(s, "tcp://127.0.0.1")
    sender = subprocess.Popen([sys.executable, os.path.abspath(__file__), "push", "tcp://127.0.0.1:%d" % port,
                               srv_pub.decode(), cli_pub.decode(), cli_sec.decode(), str(n)],
                              stdout=subprocess.DEVNULL)
    recv = s.recv
    m = recv()
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    for _ in range(n - 1):
        m = recv()
        if len(m) != 100:
            print(json.dumps({"error": "bad size"}))
            sys.exit(1)
    t1 = time.perf_counter()
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    sender.wait(timeout=60)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    print(json.dumps({"impl": "pyzmq", "msgs": n - 1, "wall_s": t1 - t0, "msgs_per_s": (n - 1) / (t1 - t0),
                      "cpu_s": cpu, "msgs_per_cpu_s": (n - 1) / cpu if cpu > 0 else 0}), flush=True)


def main():
    if sys.argv[1] == "push":
        push(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]))
    else:
        pull(int(sys.argv[2]))


if __name__ == "__main__":
    main()

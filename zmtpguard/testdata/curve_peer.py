"""CURVE interop peer for zmtpguard's tests (pyzmq / libzmq 4.3.4).

usage:
  curve_peer.py client TYPE ENDPOINT SERVER_PUB CLIENT_PUB CLIENT_SEC N
  curve_peer.py server TYPE ENDPOINT SERVER_SEC ALLOW N
      ALLOW is "-" (no ZAP handler: curve_server=True admits any key) or a
      directory of public certificates for zmq.auth's authenticator.

A client sends/receives N messages; a server receives/answers N. Everything
is bounded by a 20 s timeout; the last line printed is "ok ..." on success
or "fail ..." (exit status 1).
"""
import sys
import time

import zmq


def bind_port0(s, ep):
    """Binds s to ep on port 0: the kernel chooses the port (never a port
    picked by the library and retried); LAST_ENDPOINT says which."""
    s.bind(ep + ":0")
    return int(s.getsockopt_string(zmq.LAST_ENDPOINT).rsplit(":", 1)[1])

TIMEOUT_MS = 20000


def fail(msg):
    print("fail", msg, flush=True)
    sys.exit(1)


def client(kind, endpoint, server_pub, pub, sec, n):
    ctx = zmq.Context()
    s = ctx.socket(getattr(zmq, kind))
    s.linger = 0
    s.rcvtimeo = TIMEOUT_MS
    s.sndtimeo = TIMEOUT_MS
    s.curve_serverkey = server_pub.encode()
    s.curve_publickey = pub.encode()
    s.curve_secretkey = sec.encode()
    mon = s.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_AUTH
                               | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
                               | zmq.EVENT_DISCONNECTED)
    if kind == "DEALER":
        # ZMTP heartbeats: libzmq sends PING commands inside CURVE MESSAGEs.
        s.heartbeat_ivl = 50
    if kind == "SUB":
        s.setsockopt(zmq.SUBSCRIBE, b"")
    s.connect(endpoint)
    if kind == "XSUB":
        s.send(b"\x01")
    if n == 0:
        # Expect the handshake to fail: report the first monitor event.
        from zmq.utils.monitor import recv_monitor_message
        mon.rcvtimeo = TIMEOUT_MS
        ev = recv_monitor_message(mon)
        print("event", ev["event"], flush=True)
        print("ok handshake-failed" if ev["event"] != zmq.EVENT_HANDSHAKE_SUCCEEDED else "fail handshake-succeeded", flush=True)
        return
    got = 0
    for i in range(n):
        body = ("msg-%d" % i).encode()
        if kind == "DEALER" and i == 1:
            time.sleep(1.0)  # 20 heartbeat intervals: PINGs go out, our PONGs keep it up
        if kind in ("REQ", "DEALER"):
            s.send_multipart([body, b"part2"])
            reply = s.recv_multipart()
            if reply != [body, b"part2"]:
                fail("reply %r" % reply)
            got += 1
        elif kind == "PUSH":
            s.send_multipart([body, b"x" * 300])
        elif kind in ("SUB", "XSUB"):
            m = s.recv_multipart()
            got += 1
    if kind == "PUSH":
        # Wait for the server's single acknowledgement-free drain.
        time.sleep(0.5)
    print("ok", kind, n, got, flush=True)


def server(kind, endpoint, sec, allow, n):
    ctx = zmq.Context()
    auth = None
    if allow != "-":
        from zmq.auth.thread import ThreadAuthenticator
        auth = ThreadAuthenticator(ctx)
        auth.start()
        auth.configure_curve(domain="*", location=allow)
    s = ctx.socket(getattr(zmq, kind))
    s.linger = 0
    s.rcvtimeo = TIMEOUT_MS
    s.sndtimeo = TIMEOUT_MS
    s.curve_server = True
    s.curve_secretkey = sec.encode()
    port = bind_port0(s, endpoint)
    print("port", port, flush=True)
    try:
        if n == 0:
            # Only refuse: stay up for the client's attempt.
            time.sleep(3)
            print("ok refused-only", flush=True)
            return
        for i in range(n):
            if kind == "REP":
                m = s.recv_multipart()
                s.send_multipart(m)
            elif kind == "ROUTER":
                m = s.recv_multipart()
                s.send_multipart(m)
            elif kind == "PULL":
                m = s.recv_multipart()
                if m[0] != ("msg-%d" % i).encode():
                    fail("got %r" % m[:1])
            elif kind == "PUB":
                time.sleep(0.3 if i == 0 else 0)
                s.send_multipart([b"topic", ("msg-%d" % i).encode()])
        if kind in ("ROUTER", "REP", "PUB"):
            time.sleep(0.5)
        print("ok", kind, n, flush=True)
    finally:
        if auth is not None:
            auth.stop()


def main():
    mode, kind = sys.argv[1], sys.argv[2]
    if mode == "client":
        client(kind, sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6], int(sys.argv[7]))
    else:
        server(kind, sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]))


if __name__ == "__main__":
    main()

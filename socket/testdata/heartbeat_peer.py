"""libzmq heartbeat peer for socket's interop tests (bounded in time).

usage: heartbeat_peer.py MODE ENDPOINT IVL_MS TIMEOUT_MS TTL_MS LIFETIME_S
  MODE dealer: a DEALER (identity b"py") connects to ENDPOINT, sends b"hi".
  MODE router: a ROUTER binds ENDPOINT (port 0 = random) and prints PORT n;
               it prints GOT <identity hex> for each message.
  MODE pusher: a PUSH connects to ENDPOINT, waits 600 ms (so that the peer
               PINGs it once, announcing its TTL), then sends b"tick"
               every 10 ms.
Both set ZMQ_HEARTBEAT_IVL/TIMEOUT/TTL and print, from a socket monitor,
CONNECTED and DISCONNECTED lines; they exit after LIFETIME_S seconds or
when stdin closes.
"""
import select
import sys
import time

import zmq
import zmq.utils.monitor as zmon


def bind_port0(s, ep):
    """Binds s to ep on port 0: the kernel chooses the port (never a port
    picked by the library and retried); LAST_ENDPOINT says which."""
    s.bind(ep + ":0")
    return int(s.getsockopt_string(zmq.LAST_ENDPOINT).rsplit(":", 1)[1])

mode, ep = sys.argv[1], sys.argv[2]
ivl, tmo, ttl, life = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
ctx = zmq.Context()
s = ctx.socket({"dealer": zmq.DEALER, "router": zmq.ROUTER, "pusher": zmq.PUSH}[mode])
s.setsockopt(zmq.LINGER, 0)
s.setsockopt(zmq.HEARTBEAT_IVL, ivl)
s.setsockopt(zmq.HEARTBEAT_TIMEOUT, tmo)
s.setsockopt(zmq.HEARTBEAT_TTL, ttl)
mon = s.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)


def out(*a):
    print(*a, flush=True)


if mode == "dealer":
    s.setsockopt(zmq.IDENTITY, b"py")
    s.connect(ep)
    s.send(b"hi")
elif mode == "pusher":
    s.setsockopt(zmq.SNDHWM, 100)
    s.connect(ep)
else:
    host, port = ep.rsplit(":", 1)
    if port == "0":
        port = bind_port0(s, host)
    else:
        s.bind(ep)
    out("PORT", port)

poller = zmq.Poller()
if mode != "pusher":
    poller.register(s, zmq.POLLIN)
poller.register(mon, zmq.POLLIN)
deadline = time.monotonic() + life
while time.monotonic() < deadline:
    r, _, _ = select.select([sys.stdin], [], [], 0)
    if r and not sys.stdin.readline():
        break
    if mode == "pusher" and time.monotonic() > deadline - life + 0.6:
        try:
            s.send(b"tick", zmq.NOBLOCK)
        except zmq.Again:
            pass
    for sock, _ in poller.poll(10 if mode == "pusher" else 50):
        if sock is mon:
            ev = zmon.recv_monitor_message(mon)
            if ev["event"] in (zmq.EVENT_CONNECTED, zmq.EVENT_ACCEPTED):
                out("CONNECTED")
            elif ev["event"] == zmq.EVENT_DISCONNECTED:
                out("DISCONNECTED")
        else:
            f = s.recv_multipart()
            out("GOT", f[0].hex())
s.disable_monitor()
mon.close()
s.close()
ctx.term()

"""A KV-event publisher sending vLLM's own bytes, for zmqguard's interop tests.

Its payloads are not built here: they are the msgspec payloads of the golden
vectors (kv-events.jsonl, written by vLLM's own code), taken in file order,
one per batch. Only the framing is this script's, and it is vLLM's
ZmqEventPublisher framing: live [topic, seq (8 bytes big-endian), payload]
and a ROUTER replay service answering [id, "", start_seq] with one reply per
buffered batch with seq >= start_seq and the end marker, with the topic frame
(vLLM PR #45177) or without it (before). The live socket is an XPUB only so
that the script can wait for the subscription before it publishes (the bytes
are a PUB's).

Scenario (the Go test knows it): run A publishes seq 0..19 but skips 3, 4 and 7
on the live socket (kept in the replay buffer), waiting after each gap for the
subscriber's replay request; then the publisher "restarts" (seq back to 0,
buffer cleared) and run B publishes 0..13, skipping 1. Batch (run, seq) carries
the payload of live-batch vector number (run * 20 + seq) modulo their count
(with the 34 vectors of vLLM main 2026-08-07: each one once).

usage: vllm_publisher.py KV_EVENTS_JSONL topic|legacy [connect]

With "connect" the live socket connects to the subscriber (vLLM does so when
its endpoint names a host) instead of binding: the script prints its replay
endpoint, then reads the subscriber's endpoint from a line on stdin.
"""
import json
import sys
import time

import zmq

GOLDEN, FRAMING = sys.argv[1], sys.argv[2]
CONNECT = len(sys.argv) > 3 and sys.argv[3] == "connect"
TOPIC = b"kv-events"
END = (-1).to_bytes(8, "big", signed=True)
DEADLINE = time.monotonic() + 60

PAYLOADS = []
with open(GOLDEN) as f:
    for line in f:
        v = json.loads(line)
        if v["values"]["message"] == "kv_event_batch":
            PAYLOADS.append(bytes.fromhex(v["frames"][2]))
if not PAYLOADS:
    sys.exit("no kv_event_batch vectors in " + GOLDEN)


def batch(run, seq):
    return PAYLOADS[(run * 20 + seq) % len(PAYLOADS)]


ctx = zmq.Context()
pub = ctx.socket(zmq.XPUB)
pub.setsockopt(zmq.LINGER, 0)
rep = ctx.socket(zmq.ROUTER)
rep.setsockopt(zmq.LINGER, 0)
# Port 0: the kernel chooses the port; LAST_ENDPOINT says which.
rep.bind("tcp://127.0.0.1:0")
rep_ep = rep.getsockopt_string(zmq.LAST_ENDPOINT)
if CONNECT:
    print(f"connect {rep_ep}", flush=True)
    live = sys.stdin.readline().strip()
    pub.connect(live)
else:
    pub.bind("tcp://127.0.0.1:0")
    live = pub.getsockopt_string(zmq.LAST_ENDPOINT)
    print(f"{live} {rep_ep}", flush=True)

poller = zmq.Poller()
poller.register(pub, zmq.POLLIN)
poller.register(rep, zmq.POLLIN)
buffer = []
requests = 0


def serve(wait_for_request):
    """Serve replay requests; with wait_for_request, until one arrives."""
    global requests
    while time.monotonic() < DEADLINE:
        ev = dict(poller.poll(50))
        if pub in ev:
            pub.recv_multipart()
        if rep in ev:
            frames = rep.recv_multipart()
            if len(frames) != 3:
                continue
            ident, _, start = frames
            start = int.from_bytes(start, "big")
            for seq, payload in buffer:
                if seq >= start:
                    if FRAMING == "topic":
                        rep.send_multipart([ident, b"", TOPIC, seq.to_bytes(8, "big"), payload])
                    else:
                        rep.send_multipart([ident, b"", seq.to_bytes(8, "big"), payload])
            if FRAMING == "topic":
                rep.send_multipart([ident, b"", b"", END, b""])
            else:
                rep.send_multipart([ident, b"", END, b""])
            requests += 1
            if wait_for_request:
                return
        elif not wait_for_request:
            return
    sys.exit("timed out waiting for a replay request")


# Wait for the subscription.
while time.monotonic() < DEADLINE:
    if pub.poll(100) and pub.recv().startswith(b"\x01"):
        break

for run, seqs, skips in ((0, range(20), {3, 4, 7}), (1, range(14), {1})):
    buffer.clear()
    gap = False
    for seq in seqs:
        payload = batch(run, seq)
        buffer.append((seq, payload))
        if seq in skips:
            gap = True
            continue
        pub.send_multipart([TOPIC, seq.to_bytes(8, "big"), payload])
        if gap:
            serve(True)
            gap = False
        serve(False)

# Linger for late requests until stdin closes.
sys.stdin.read()

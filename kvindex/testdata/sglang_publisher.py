"""A KV-event publisher with SGLang's framing, for zmqguard's interop tests.

Written for zmqguard (not taken from SGLang). Its payloads are not built here:
they are the msgspec payloads of SGLang golden vectors
(internal/testkit/golden/testdata/sglang/kv-events.jsonl, written by SGLang's own
code), named on the command line, one per batch, in order. Only the framing is
this script's, and it is the framing SGLang's ZmqEventPublisher uses (as the
README of those vectors records it): live [topic, seq (8 bytes big-endian),
payload]; a ROUTER answering [id, "", start_seq] with [id, "", seq, payload]
per buffered batch with seq >= start_seq (no topic frame) and then the end
marker [id, "", ffffffffffffffff, ""]; any other request is dropped without
an answer. The live socket is an XPUB only so that the script can wait for
the subscription before it publishes (the bytes are a PUB's).

usage: sglang_publisher.py KV_EVENTS_JSONL TOPIC SKIP VECTOR_ID...

Batch seq k carries the payload of the k-th VECTOR_ID. Seq SKIP is kept in
the replay buffer but not sent live (-1: none), so that the subscriber
meets a gap and asks the ROUTER for it. The script prints "LIVE REPLAY"
endpoints, publishes, serves replay requests until stdin closes.
"""
import json
import sys
import threading
import time

import zmq

GOLDEN, TOPIC, SKIP = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3])
IDS = sys.argv[4:]
END = (-1).to_bytes(8, "big", signed=True)
DEADLINE = time.monotonic() + 60

by_id = {}
with open(GOLDEN) as f:
    for line in f:
        v = json.loads(line)
        if v["values"]["message"] == "kv_event_batch":
            by_id[v["id"]] = bytes.fromhex(v["frames"][2])
missing = [i for i in IDS if i not in by_id]
if missing or not IDS:
    sys.exit("unknown or no vector ids: %r" % missing)

ctx = zmq.Context()
pub = ctx.socket(zmq.XPUB)
pub.setsockopt(zmq.LINGER, 0)
rep = ctx.socket(zmq.ROUTER)
rep.setsockopt(zmq.LINGER, 0)
# Port 0: the kernel chooses; LAST_ENDPOINT says which.
pub.bind("tcp://127.0.0.1:0")
rep.bind("tcp://127.0.0.1:0")
print(pub.getsockopt_string(zmq.LAST_ENDPOINT), rep.getsockopt_string(zmq.LAST_ENDPOINT), flush=True)

buffer = [(seq, by_id[i]) for seq, i in enumerate(IDS)]


def serve_one(timeout_ms):
    """Answer at most one replay request; report whether one came."""
    if not rep.poll(timeout_ms):
        return False
    frames = rep.recv_multipart()
    if len(frames) != 3 or frames[1] != b"" or len(frames[2]) != 8:
        return True  # dropped, no answer, as SGLang does
    ident, start = frames[0], int.from_bytes(frames[2], "big")
    for seq, payload in buffer:
        if seq >= start:
            rep.send_multipart([ident, b"", seq.to_bytes(8, "big"), payload])
    rep.send_multipart([ident, b"", END, b""])
    return True


# Wait for the subscription.
while time.monotonic() < DEADLINE:
    if pub.poll(100) and pub.recv().startswith(b"\x01"):
        break
else:
    sys.exit("timed out waiting for a subscription")

for seq, payload in buffer:
    if seq != SKIP:
        pub.send_multipart([TOPIC, seq.to_bytes(8, "big"), payload])

# Serve replay requests until stdin closes (the test is done).
stdin_closed = False


def watch_stdin():
    global stdin_closed
    sys.stdin.read()
    stdin_closed = True


threading.Thread(target=watch_stdin, daemon=True).start()
while not stdin_closed and time.monotonic() < DEADLINE:
    serve_one(50)

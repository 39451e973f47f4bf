"""A KV-event publisher written to vLLM's exact bytes, for zmqguard's interop tests.

It speaks what vllm/distributed/kv_events.py's ZmqEventPublisher sends: live
[topic, seq (8 bytes big-endian), payload] and a ROUTER replay service
answering [id, "", start_seq] with one reply per buffered batch with
seq >= start_seq and the end marker. Payloads are msgpack KVEventBatch arrays
[ts, events, data_parallel_rank]; events are tagged maps (vLLM >= 0.26, PR
#42892) or tagged arrays (before), replies carry the topic frame (PR #45177)
or not. The live socket is an XPUB only so that the script can wait for the
subscription before it publishes (the bytes are a PUB's).

Scenario (the Go test knows it): run A publishes seq 0..9 but skips 3, 4 and 7
on the live socket (kept in the replay buffer), waiting after each gap for the
subscriber's replay request; then the publisher "restarts" (seq back to 0,
buffer cleared) and run B publishes 0..4, skipping 1.

usage: vllm_publisher.py map|array topic|legacy [connect]

With "connect" the live socket connects to the subscriber (vLLM does so when
its endpoint names a host) instead of binding: the script prints its replay
endpoint, then reads the subscriber's endpoint from a line on stdin.
"""
import sys
import time

import msgpack
import zmq

FORM, FRAMING = sys.argv[1], sys.argv[2]
CONNECT = len(sys.argv) > 3 and sys.argv[3] == "connect"
TOPIC = b"kv@pod-1@model"
END = (-1).to_bytes(8, "big", signed=True)
DEADLINE = time.monotonic() + 60


def event(kind, fields):
    # fields: list of (name, value, required)
    if FORM == "map":
        m = {"type": kind}
        for name, value, required in fields:
            if required or value is not None:
                m[name] = value
        return m
    arr = [kind] + [v for _, v, _ in fields]
    while len(arr) > 1 and arr[-1] is None and not fields[len(arr) - 2][2]:
        arr.pop()
    return arr


def batch(run, seq):
    base = run * 1000 + seq
    h = [base, (1 << 63) + base] if seq % 2 == 0 else [bytes([base % 256]) * 31 + bytes([seq])]
    n = len(h)
    stored = event("BlockStored", [
        ("block_hashes", h, True), ("parent_block_hash", base - 1 if seq else None, True),
        ("token_ids", list(range(base, base + 2 * n)), True), ("block_size", 2, True),
        ("lora_id", None, True), ("medium", "GPU", True), ("lora_name", None, True),
        ("extra_keys", [["salt", seq]] * n if seq % 3 == 0 else None, False),
        ("group_idx", 0 if seq % 2 else None, False),
    ])
    removed = event("BlockRemoved", [("block_hashes", [base], True), ("medium", "CPU", True),
                                     ("group_idx", None, False)])
    events = [stored, removed]
    if seq == 5:
        events.append(event("AllBlocksCleared", []))
    return msgpack.packb([1700000000.0 + base, events, 0], use_bin_type=True)


ctx = zmq.Context()
pub = ctx.socket(zmq.XPUB)
pub.setsockopt(zmq.LINGER, 0)
rep = ctx.socket(zmq.ROUTER)
rep.setsockopt(zmq.LINGER, 0)
rep_port = rep.bind_to_random_port("tcp://127.0.0.1")
if CONNECT:
    print(f"connect tcp://127.0.0.1:{rep_port}", flush=True)
    live = sys.stdin.readline().strip()
    pub.connect(live)
else:
    live = "tcp://127.0.0.1:%d" % pub.bind_to_random_port("tcp://127.0.0.1")
    print(f"{live} tcp://127.0.0.1:{rep_port}", flush=True)

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
time.sleep(0.05)

for run, seqs, skips in ((0, range(10), {3, 4, 7}), (1, range(5), {1})):
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
    time.sleep(0.2)

# Linger for late requests until stdin closes.
sys.stdin.read()

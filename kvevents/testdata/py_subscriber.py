"""A pyzmq SUB and DEALER reading zmqguard's Go publisher, for the interop tests.

It subscribes to the live endpoint, prints the hex of the first N live
messages' frames, then asks the replay endpoint for everything from seq 0 as
vLLM's own subscribers do (a DEALER sending ["", start_seq]) and prints every
reply's frames up to the end marker. The Go test compares the payloads with
the golden vectors' bytes (written by vLLM's own encoder). Output lines:
"live <topic> <seq> <payload>" and "replay <frame>|<frame>|..." in hex.

usage: py_subscriber.py LIVE REPLAY N
"""
import sys
import time

import zmq

live, replay, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
ctx = zmq.Context()
sub = ctx.socket(zmq.SUB)
sub.setsockopt(zmq.LINGER, 0)
sub.setsockopt(zmq.RCVTIMEO, 20000)
sub.setsockopt(zmq.SUBSCRIBE, b"")
sub.connect(live)
print("ready", flush=True)
for _ in range(n):
    topic, seq, payload = sub.recv_multipart()
    print("live", topic.hex(), seq.hex(), payload.hex(), flush=True)

d = ctx.socket(zmq.DEALER)
d.setsockopt(zmq.LINGER, 0)
d.setsockopt(zmq.RCVTIMEO, 20000)
d.connect(replay)
d.send_multipart([b"", (0).to_bytes(8, "big")])
while True:
    frames = d.recv_multipart()
    print("replay", "|".join(f.hex() for f in frames), flush=True)
    if frames[-2] == b"\xff" * 8:
        break

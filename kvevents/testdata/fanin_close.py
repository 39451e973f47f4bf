"""One engine for TestFanInConnGone: a pyzmq PUB (an XPUB, to see the
subscription) that connects to the fan-in endpoint argv[1] and publishes
topic argv[2] as vLLM does ([topic, seq (8 bytes big-endian), payload]).

stdin, one command a line, each answered "ok" once done:
  send SEQ HEX   send one message (payload as hex)
  close          close the socket with a linger (what was sent is written
                 out first) and end the context; then exit
"""
import sys
import time

import zmq

ctx = zmq.Context()
pub = ctx.socket(zmq.XPUB)
pub.connect(sys.argv[1])
topic = sys.argv[2].encode()
end = time.monotonic() + 20
while time.monotonic() < end:
    if pub.poll(100) and pub.recv().startswith(b"\x01"):
        break
else:
    print("error no subscription within 20 s", flush=True)
    sys.exit(1)
print("ok", flush=True)
for line in sys.stdin:
    f = line.split()
    if not f:
        continue
    if f[0] == "send":
        pub.send_multipart([topic, int(f[1]).to_bytes(8, "big"), bytes.fromhex(f[2])])
        print("ok", flush=True)
    elif f[0] == "close":
        pub.setsockopt(zmq.LINGER, 10000)
        pub.close()
        ctx.term()  # returns once the messages are written out
        print("ok", flush=True)
        break

"""Engines publishing KV events the way llm-d deploys vLLM, for zmqguard's
fan-in interop tests: each engine's live socket CONNECTS to the indexer's
one bound endpoint (vLLM's ZmqEventPublisher connects when the endpoint
names a host) from its own address, and names itself in its topic
(kv@<pod ip>@<model>); each engine binds its own replay ROUTER on its own
address.

The payloads are built by the Go test (kvevents.AppendBatch) and sent as
hex; only the framing is this script's: vLLM's live [topic, seq (8 bytes
big-endian), payload] and the replay service answering [id, "", start_seq]
with [id, "", topic, seq, payload] per kept batch with seq >= start_seq,
then the end marker [id, "", "", -1, ""] (vLLM PR #45177). The live socket
is an XPUB only so that the script can wait for the subscription before it
reports an engine ready (the bytes are a PUB's).

Commands, one JSON object per line on stdin, each answered by one line
("ok ..." or "error ..."):
  {"op": "replay", "name", "src", "port"}
      bind engine name's replay ROUTER on tcp://SRC:PORT (0: the kernel
      chooses); answers "ok ENDPOINT".
  {"op": "engine", "name", "src", "live", "topic"}
      connect from address src ("tcp://SRC:0;HOST:PORT"); answers "ok"
      once the subscription arrived.
  {"op": "send", "name", "seq", "payload", "live"}
      keep (seq, payload) for replay; send it live unless live is false.
  {"op": "topic", "name", "topic"}   publish under another topic.
  {"op": "reconnect", "name"} a new live connection, same run (the
      replay buffer kept: a network cut, not a restart).
  {"op": "restart", "name"}   a new live connection, the replay buffer
      emptied (a restarted engine: its sequence starts again).
  {"op": "close", "name"}     close the engine's sockets.
  {"op": "quit"}
"""
import json
import sys
import time

import zmq

END = (-1).to_bytes(8, "big", signed=True)
DEADLINE = time.monotonic() + 300

ctx = zmq.Context()
engines = {}
pending = {}  # replay ROUTERs bound before their engine connects
poller = zmq.Poller()
poller.register(sys.stdin.fileno(), zmq.POLLIN)


def connect(e):
    pub = ctx.socket(zmq.XPUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.connect("tcp://%s:0;%s" % (e["src"], e["live"].split("://", 1)[1]))
    end = time.monotonic() + 20
    while time.monotonic() < end:
        if pub.poll(100) and pub.recv().startswith(b"\x01"):
            e["pub"] = pub
            return True
    pub.close()
    return False


def serve(rep, e):
    frames = rep.recv_multipart()
    if len(frames) != 3:
        return
    ident, _, start = frames
    start = int.from_bytes(start, "big")
    for seq, payload in e["buffer"]:
        if seq >= start:
            rep.send_multipart([ident, b"", e["topic"], seq.to_bytes(8, "big"), payload])
    rep.send_multipart([ident, b"", b"", END, b""])


def handle(c):
    op = c["op"]
    if op == "quit":
        return None
    if op == "replay":
        rep = ctx.socket(zmq.ROUTER)
        rep.setsockopt(zmq.LINGER, 0)
        rep.bind("tcp://%s:%d" % (c["src"], c["port"]))
        poller.register(rep, zmq.POLLIN)
        pending[c["name"]] = rep
        return "ok " + rep.getsockopt_string(zmq.LAST_ENDPOINT)
    if op == "engine":
        e = {"topic": c["topic"].encode(), "src": c["src"], "live": c["live"], "buffer": [],
             "rep": pending.pop(c["name"], None)}
        if not connect(e):
            return "error no subscription within 20 s"
        engines[c["name"]] = e
        return "ok"
    e = engines.get(c["name"])
    if e is None:
        return "error no engine " + c["name"]
    if op == "send":
        payload = bytes.fromhex(c["payload"])
        e["buffer"].append((c["seq"], payload))
        if c.get("live", True):
            e["pub"].send_multipart([e["topic"], c["seq"].to_bytes(8, "big"), payload])
        return "ok"
    if op == "topic":
        e["topic"] = c["topic"].encode()
        return "ok"
    if op == "reconnect":
        e["pub"].close()
        return "ok" if connect(e) else "error no subscription within 20 s"
    if op == "restart":
        e["pub"].close()
        e["buffer"] = []
        return "ok" if connect(e) else "error no subscription within 20 s"
    if op == "close":
        e["pub"].close()
        if e["rep"] is not None:
            poller.unregister(e["rep"])
            e["rep"].close()
        del engines[c["name"]]
        return "ok"
    return "error unknown op " + op


while time.monotonic() < DEADLINE:
    ready = dict(poller.poll(100))
    for e in list(engines.values()):
        if e["rep"] is not None and e["rep"] in ready:
            serve(e["rep"], e)
    if sys.stdin.fileno() in ready:
        line = sys.stdin.readline()
        if not line:
            break
        out = handle(json.loads(line))
        if out is None:
            break
        print(out, flush=True)
for e in engines.values():
    e["pub"].close()
    if e["rep"] is not None:
        e["rep"].close()
ctx.term()

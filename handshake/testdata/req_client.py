"""A decode-side NIXL handshake client on pyzmq (libzmq) and Python msgpack.

Usage: req_client.py ENDPOINT REQUEST...

Each REQUEST is "v1", "v2:TP" or "v3:PP:TP". For each, as vLLM's decode
worker does, a fresh REQ socket connects, sends the request (V1 the raw
bytes, V2/V3 msgpack (GET_META_MSG, ...) with GET_META_MSG as bin), waits
at most 5000 ms and decodes the reply. One line per request on stdout:

  REQUEST frames=N hash=H ts=TYPE meta=HEX engine=ID

where meta is the agent metadata re-encoded by Python's msgpack after
decoding (so the Go side can compare it byte for byte with its own
encoding), or, when the agent metadata does not decode, meta=ERROR:Type.
A timeout prints "REQUEST TIMEOUT".
"""
import sys

import msgpack
import zmq

GET_META_MSG = b"get_meta_msg"


def handshake(ctx, endpoint, spec):
    parts = spec.split(":")
    if parts[0] == "v1":
        body = GET_META_MSG
    elif parts[0] == "v2":
        body = msgpack.packb((GET_META_MSG, int(parts[1])))
    else:
        body = msgpack.packb((GET_META_MSG, int(parts[1]), int(parts[2])))
    sock = ctx.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 5000)
    sock.connect(endpoint)
    try:
        sock.send(body)
        try:
            frames = sock.recv_multipart()
        except zmq.Again:
            return "%s TIMEOUT" % spec
    finally:
        sock.close()
    out = ["%s frames=%d" % (spec, len(frames))]
    if parts[0] == "v1":
        meta_bytes = frames[0]
        out.append("hash=-")
    else:
        payload = msgpack.unpackb(frames[0], raw=False)
        out.append("hash=%s" % payload["compatibility_hash"].replace(" ", "_"))
        meta_bytes = payload["agent_metadata_bytes"]
        assert type(meta_bytes) is bytes
    if parts[0] == "v3":
        ts = msgpack.unpackb(frames[1])
        out.append("ts=%s" % type(ts).__name__)
    else:
        out.append("ts=-")
    try:
        meta = msgpack.unpackb(meta_bytes, raw=False)
    except Exception as e:  # what a vLLM client would raise on, too
        out.append("meta=ERROR:%s" % type(e).__name__)
        return " ".join(out)
    if not isinstance(meta, dict):
        out.append("meta=ERROR:%s" % type(meta).__name__)
        return " ".join(out)
    out.append("meta=%s" % msgpack.packb(meta).hex())
    out.append("engine=%s" % meta["engine_id"])
    return " ".join(out)


def main():
    ctx = zmq.Context()
    for spec in sys.argv[2:]:
        print(handshake(ctx, sys.argv[1], spec), flush=True)
    ctx.term()


if __name__ == "__main__":
    main()

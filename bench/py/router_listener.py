"""pyzmq ROUTER handshake listener: the Python reference for zmqguard's.

Usage: router_listener.py ENDPOINT [ENGINE_ID [PP_SIZE TP_SIZE [COMPAT_HASH]]]

ENDPOINT may name port * (tcp://127.0.0.1:*): the kernel chooses a free port,
and once bound the script writes "bound endpoint=tcp://127.0.0.1:PORT" (the
socket's LAST_ENDPOINT) on stderr; bench/run.sh reads the port from it.

Does in Python what vLLM's V3 NIXL side-channel listener does per request:
receive [identity, b"", request] on a ROUTER, decode the msgpack request
(GET_META_MSG, pp_rank, tp_rank), look the rank's pre-encoded
NixlHandshakePayload up in a dict, and reply
[identity, b"", payload, msgpack(time.perf_counter())]. The payloads are the
same demo metadata `zmqguard handshake-listener` serves (engine_id,
device_id = tp, num_blocks = 1000 + 100 pp + tp, two 32 KiB-block regions,
layout HND, block size 16, FLASH_ATTN), encoded by Python's msgpack as
msgspec encodes the dataclass (a map in field order).

Like vLLM's listener it expects exactly three frames and three request
elements; a malformed request is skipped and counted here (vLLM's thread
would die). It serves until SIGINT or SIGTERM, then prints one JSON line
with the number of requests served.
"""
import json
import signal
import sys
import time

import msgpack
import zmq

GET_META_MSG = b"get_meta_msg"
DEMO_HASH = "c940fa5f8b20d4d98d462af8137fb052eb4827d811a4ad4dcde0138bddb6d468"
BLOCK_LEN = 16 * 8 * 128 * 2


def agent_metadata(engine_id, pp, tp):
    base = 0x7F0000000000 + (pp << 36) + (tp << 32)
    num_blocks = 1000 + pp * 100 + tp
    return {
        "engine_id": engine_id,
        "agent_metadata": b"zmqguard-demo-nixl-agent/%s/pp%d/tp%d" % (engine_id.encode(), pp, tp),
        "kv_caches_base_addr": [base, base + num_blocks * BLOCK_LEN],
        "device_id": tp,
        "num_blocks": num_blocks,
        "block_lens": [BLOCK_LEN, BLOCK_LEN],
        "block_strides": [BLOCK_LEN, BLOCK_LEN],
        "kv_cache_layout": "HND",
        "block_size": 16,
        "ssm_sizes": [0, 0],
        "attn_backend_name": "FLASH_ATTN",
        "physical_blocks_per_logical_kv_block": 1,
        "region_num_blocks": None,
        "region_group_ids": None,
        "region_names": None,
        "region_mem_types": None,
        "dcp_size": 1,
        "pcp_size": 1,
        "region_members": [],
    }


def stop(signum, frame):
    raise KeyboardInterrupt


def main():
    endpoint = sys.argv[1]
    engine_id = sys.argv[2] if len(sys.argv) > 2 else "bench"
    pp_size = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    tp_size = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    compat_hash = sys.argv[5] if len(sys.argv) > 5 else DEMO_HASH
    encoded = {}
    for pp in range(pp_size):
        for tp in range(tp_size):
            meta = msgpack.packb(agent_metadata(engine_id, pp, tp))
            encoded[(pp, tp)] = msgpack.packb(
                {"compatibility_hash": compat_hash, "agent_metadata_bytes": meta}
            )
    signal.signal(signal.SIGTERM, stop)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(endpoint)
    print("listening bound endpoint=%s" % sock.getsockopt_string(zmq.LAST_ENDPOINT), file=sys.stderr, flush=True)
    served = bad = 0
    try:
        while True:
            frames = sock.recv_multipart()
            try:
                identity, _, msg = frames
                get_meta, pp, tp = msgpack.unpackb(msg)
                payload = encoded[(pp, tp)]
            except Exception:
                bad += 1
                continue
            if get_meta != GET_META_MSG:
                bad += 1
                continue
            sock.send_multipart(
                (identity, b"", payload, msgpack.packb(time.perf_counter()))
            )
            served += 1
    except KeyboardInterrupt:
        pass
    sock.close()
    ctx.term()
    print(json.dumps({"program": "router_listener.py", "served": served, "bad": bad}), flush=True)


if __name__ == "__main__":
    main()

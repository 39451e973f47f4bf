"""A stand-in for vLLM's V3 NIXL side-channel listener, on pyzmq (libzmq).

Usage: vllm_v3_listener.py ENGINE_ID COMPAT_HASH PP_SIZE TP_SIZE

Binds a ROUTER on a free loopback port, prints "PORT <n>" and serves, until
standard input closes, what vLLM's prefill side serves since the V3
handshake: a request msgpack (GET_META_MSG, pp_rank, tp_rank) gets
[identity, b"", payload, msgpack(time.perf_counter())], where payload is a
NixlHandshakePayload map holding the compatibility hash and the msgpack of
that rank's NixlAgentMetadata (a map in field order, as msgspec encodes a
dataclass; the larger field set of later connector sources, which a
receiver of the 11-field form of connector versions 3 to 6 skips: the exact
bytes vLLM main of 2026-08-07 writes are checked in golden_test.go). Like
vLLM's listener it unpacks exactly three frames and three
request elements; this stand-in is for well-behaved clients only.
"""
import sys
import threading
import time

import msgpack
import zmq


def bind_port0(s, ep):
    """Binds s to ep on port 0: the kernel chooses the port (never a port
    picked by the library and retried); LAST_ENDPOINT says which."""
    s.bind(ep + ":0")
    return int(s.getsockopt_string(zmq.LAST_ENDPOINT).rsplit(":", 1)[1])

GET_META_MSG = b"get_meta_msg"


def agent_metadata(engine_id, pp, tp):
    # Keep in sync with pyListenerMetadata in python_listener_test.go.
    return {
        "engine_id": engine_id,
        "agent_metadata": b"nixl-agent-%d-%d" % (pp, tp),
        "kv_caches_base_addr": [0x7F3A00000000 + tp * (1 << 20), 4096 + pp],
        "device_id": tp,
        "num_blocks": 1000 + 100 * pp + tp,
        "block_lens": [65536, 65536],
        "block_strides": [65536, 65536],
        "kv_cache_layout": "HND",
        "block_size": 16,
        "ssm_sizes": (0, 0),
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


def main():
    engine_id, compat_hash = sys.argv[1], sys.argv[2]
    pp_size, tp_size = int(sys.argv[3]), int(sys.argv[4])
    encoded = {}
    for pp in range(pp_size):
        for tp in range(tp_size):
            meta = msgpack.packb(agent_metadata(engine_id, pp, tp))
            encoded[(pp, tp)] = msgpack.packb(
                {"compatibility_hash": compat_hash, "agent_metadata_bytes": meta}
            )

    stop = threading.Event()

    def watch_stdin():
        sys.stdin.read()
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()

    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 100)
    port = bind_port0(sock, "tcp://127.0.0.1")
    print("PORT %d" % port, flush=True)
    served = 0
    while not stop.is_set():
        try:
            identity, _, msg = sock.recv_multipart()
        except zmq.Again:
            continue
        get_meta, pp, tp = msgpack.unpackb(msg)
        if get_meta != GET_META_MSG:
            print("unexpected message", get_meta, file=sys.stderr)
        sock.send_multipart(
            (identity, b"", encoded[(pp, tp)], msgpack.packb(time.perf_counter()))
        )
        served += 1
    sock.close()
    ctx.term()
    print("SERVED %d" % served, flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""A vLLM-shaped engine core and front-end for zmqguard's interop tests.

push ENDPOINT: connect a PUSH socket, send a scenario of EngineCoreOutputs
  laid out as vLLM's engine core lays them out (array_like structs with every
  field, as msgspec writes them: EngineCoreOutputs 8, EngineCoreOutput 14;
  numpy arrays as [dtype.str, shape, data] and
  torch tensors as [dtype name, shape, data], data inline as ext 3 below 256
  bytes, else an aux frame index), a junk frame first and ENGINE_CORE_DEAD
  last; print one JSON line per valid message with the values sent.
replay ENDPOINT FILE: connect a PUSH socket and send, through libzmq, the
  frames of every engine_core_outputs vector of FILE (vLLM's golden
  engine-outputs.jsonl: bytes written by vLLM's own engine core), a junk
  frame first and ENGINE_CORE_DEAD last; print each vector's id.
pull N: bind a PULL socket on loopback, print its endpoint, decode N
  messages as vLLM's front-end does (ext 3 views, aux frames by index) and
  print one JSON line per message with the values received.
Everything is bounded in time (10 s per receive, linger 5 s).
"""
import json
import sys

import msgpack
import numpy as np
import zmq


def bind_port0(s, ep):
    """Binds s to ep on port 0: the kernel chooses the port (never a port
    picked by the library and retried); LAST_ENDPOINT says which."""
    s.bind(ep + ":0")
    return int(s.getsockopt_string(zmq.LAST_ENDPOINT).rsplit(":", 1)[1])

THRESHOLD = 256  # VLLM_MSGPACK_ZERO_COPY_THRESHOLD
RAW_VIEW = 3     # CUSTOM_TYPE_RAW_VIEW


class Enc:
    def __init__(self):
        self.aux = []

    def arr(self, a, torch_name=None):
        """Encode an ndarray (torch_name set: as a torch tensor of that dtype)."""
        a = np.ascontiguousarray(a)
        dtype = torch_name if torch_name else a.dtype.str
        data = a.tobytes()
        if not a.shape or len(data) < THRESHOLD:
            d = msgpack.ExtType(RAW_VIEW, data)
        else:
            self.aux.append(data)
            d = len(self.aux)
        return [dtype, list(a.shape), d]


def output(req, toks, logprobs=None, prompt_lp=None, pooling=None, finish=None, stop=None,
           events=None, kv=None, routed=None, nans=0):
    """EngineCoreOutput: all 14 fields (msgspec ignores omit_defaults for array_like)."""
    return [req, toks, logprobs, prompt_lp, pooling, finish, stop, events, kv, None, None, None,
            routed, nans]


def outputs_msg(engine, outs, ts, stats=None, utility=None, finished=None, wave_complete=None, start_wave=None):
    """EngineCoreOutputs: all 8 fields."""
    return [engine, outs, stats, ts, utility, finished, wave_complete, start_wave]


def jarr(dtype, a):
    return {"dtype": dtype, "shape": list(a.shape), "data": np.asarray(a, dtype=np.float64).ravel().tolist()}


def scenario():
    """Yields (frames, expected) pairs."""
    # 1: engine 1, logprobs in aux frames, a finished request with a stop string.
    e = Enc()
    ids = np.arange(20 * 6, dtype=np.int32).reshape(20, 6) * 3
    lps = (-np.arange(20 * 6, dtype=np.float32) / 4).reshape(20, 6)
    ranks = np.arange(20, dtype=np.int64)
    lp = [e.arr(ids), e.arr(lps), e.arr(ranks), [0, 20]]
    outs = [output("req-A", [5, 6, 7], logprobs=lp),
            output("req-B", [9], finish=0, stop="</s>")]
    body = outputs_msg(1, outs, 100.25, finished=["req-B"])
    yield [msgpack.packb(body)] + e.aux, {
        "engine": 1, "timestamp": 100.25, "finished": ["req-B"], "utility": None,
        "outputs": [
            {"request_id": "req-A", "new_token_ids": [5, 6, 7], "finish_reason": None, "stop_reason": None,
             "new_logprobs": {"ids": jarr("<i4", ids), "logprobs": jarr("<f4", lps), "ranks": jarr("<i8", ranks),
                              "cu": [0, 20]},
             "prompt_logprobs": None, "pooling_output": None, "routed_experts": None, "events": None, "nans": 0},
            {"request_id": "req-B", "new_token_ids": [9], "finish_reason": 0, "stop_reason": "</s>",
             "new_logprobs": None, "prompt_logprobs": None, "pooling_output": None, "routed_experts": None,
             "events": None, "nans": 0},
        ]}
    # 2: engine 0, torch pooling output inline, prompt logprobs tensors
    # (bfloat16 as raw bytes), routed experts, events, NaN count, LENGTH.
    e = Enc()
    pool = np.array([0.5, -1.0, 2.0, 0.125], dtype=np.float32)
    routed = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int16)
    bf = np.array([0x3f80, 0xc000], dtype=np.uint16)  # 1.0, -2.0 as bfloat16 bits
    plp = [e.arr(np.array([[1, 2]], dtype=np.int64), "int64"),
           e.arr(bf.reshape(1, 2), "bfloat16"),
           e.arr(np.array([0], dtype=np.int64), "int64")]
    events = [{"type": 1, "timestamp": 1.5}, {"type": 2, "timestamp": 2.5}]
    outs = [output("emb-1", [], prompt_lp=plp, pooling=e.arr(pool, "float32"), finish=1, stop=13,
                   events=events, kv={"remote": "x"}, routed=e.arr(routed), nans=3)]
    body = outputs_msg(0, outs, 7.0)
    yield [msgpack.packb(body)] + e.aux, {
        "engine": 0, "timestamp": 7.0, "finished": None, "utility": None,
        "outputs": [
            {"request_id": "emb-1", "new_token_ids": [], "finish_reason": 1, "stop_reason": 13,
             "new_logprobs": None,
             "prompt_logprobs": {"ids": jarr("int64", np.array([[1, 2]])), "logprobs": jarr("bfloat16", np.array([[1.0, -2.0]])),
                                 "ranks": jarr("int64", np.array([0])), "cu": None},
             "pooling_output": jarr("float32", pool), "routed_experts": jarr("<i2", routed),
             "events": [[1, 1.5], [2, 2.5]], "nans": 3}]}
    # 3: a utility output (result True) and stats from engine 1.
    stats = {"num_running_reqs": 2, "num_waiting_reqs": 1, "step_counter": 9, "current_wave": 0,
             "kv_cache_usage": 0.25, "prefix_cache_stats": {"reset": False, "requests": 3}}
    body = outputs_msg(1, [], 8.5, stats=stats, utility=[0xab54a98ceb1f0ad2, None, [None, True]])
    yield [msgpack.packb(body)], {
        "engine": 1, "timestamp": 8.5, "finished": None, "outputs": [],
        "utility": {"call_id": 0xab54a98ceb1f0ad2, "failure": None, "result": True}}
    # 4: a failed utility call.
    body = outputs_msg(0, [], 9.5, utility=[7, "boom", None])
    yield [msgpack.packb(body)], {"engine": 0, "timestamp": 9.5, "finished": None, "outputs": [],
                                  "utility": {"call_id": 7, "failure": "boom", "result": None}}


def push(endpoint):
    ctx = zmq.Context()
    s = ctx.socket(zmq.PUSH)
    s.setsockopt(zmq.LINGER, 5000)
    s.connect(endpoint)
    s.send(b"\x45")  # the seed's junk frame
    for frames, expected in scenario():
        s.send_multipart(frames, copy=False)
        print(json.dumps(expected), flush=True)
    s.send(b"ENGINE_CORE_DEAD")
    s.close()
    ctx.term()


def replay(endpoint, path):
    vectors = []
    with open(path) as f:
        for line in f:
            v = json.loads(line)
            if v["values"].get("message") == "engine_core_outputs":
                vectors.append(v)
    ctx = zmq.Context()
    s = ctx.socket(zmq.PUSH)
    s.setsockopt(zmq.LINGER, 5000)
    s.connect(endpoint)
    s.send(b"\x45")  # the seed's junk frame
    for v in vectors:
        s.send_multipart([bytes.fromhex(h) for h in v["frames"]])
        print(v["id"], flush=True)
    s.send(b"ENGINE_CORE_DEAD")
    s.close()
    ctx.term()


def decode_arr(a, aux):
    dtype, shape, data = a
    if isinstance(data, int):
        data = aux[data]
    elif isinstance(data, msgpack.ExtType):
        assert data.code == RAW_VIEW, data.code
        data = data.data
    if dtype == "bfloat16":
        vals = (np.frombuffer(data, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
    else:
        npdt = {"float32": "<f4", "int64": "<i8", "int32": "<i4", "float16": "<f2", "bool": "|b1",
                "int16": "<i2", "uint8": "|u1", "int8": "|i1", "float64": "<f8"}.get(dtype, dtype)
        vals = np.frombuffer(data, dtype=np.dtype(npdt))
    return {"dtype": dtype, "shape": list(shape),
            "data": np.asarray(vals, dtype=np.float64).reshape(shape).ravel().tolist()}


def get(f, i, default=None):
    return f[i] if len(f) > i else default


def decode_lp(lp, aux):
    if lp is None:
        return None
    return {"ids": decode_arr(lp[0], aux), "logprobs": decode_arr(lp[1], aux), "ranks": decode_arr(lp[2], aux),
            "cu": get(lp, 3)}


def decode(frames):
    aux = frames  # aux index i is frame i
    m = msgpack.unpackb(frames[0], raw=False, strict_map_key=False)
    outs = []
    for o in get(m, 1, []):
        pool, routed, ev = get(o, 4), get(o, 12), get(o, 7)
        outs.append({
            "request_id": o[0], "new_token_ids": o[1], "finish_reason": get(o, 5), "stop_reason": get(o, 6),
            "new_logprobs": decode_lp(get(o, 2), aux), "prompt_logprobs": decode_lp(get(o, 3), aux),
            "pooling_output": decode_arr(pool, aux) if pool is not None else None,
            "routed_experts": decode_arr(routed, aux) if routed is not None else None,
            "events": [[e["type"], e["timestamp"]] for e in ev] if ev is not None else None,
            "nans": get(o, 13, 0)})
    u = get(m, 4)
    util = None
    if u is not None:
        util = {"call_id": u[0], "failure": u[1], "result": u[2][1] if u[2] is not None else None}
    return {"engine": get(m, 0, 0), "timestamp": get(m, 3, 0.0), "finished": get(m, 5), "outputs": outs,
            "utility": util}


def pull(n):
    ctx = zmq.Context()
    s = ctx.socket(zmq.PULL)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVTIMEO, 10000)
    port = bind_port0(s, "tcp://127.0.0.1")
    print("tcp://127.0.0.1:%d" % port, flush=True)
    for _ in range(n):
        frames = s.recv_multipart()
        print(json.dumps(decode(frames)), flush=True)
    s.close()
    ctx.term()


if __name__ == "__main__":
    if sys.argv[1] == "push":
        push(sys.argv[2])
    elif sys.argv[1] == "replay":
        replay(sys.argv[2], sys.argv[3])
    else:
        pull(int(sys.argv[2]))

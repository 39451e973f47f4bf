#!/usr/bin/python3
"""Side-by-side for BenchmarkDecode256Python: decode the same frames the Go
benchmark decodes, in a loop, for about SECONDS of CPU time, two ways:
"unpackb" (msgpack.unpackb of the body only) and "vllm" (unpackb with an
ext hook for inline raw views plus numpy views of every array, inline and
aux, which is what vLLM's decoder does). Prints one JSON line with CPU
nanoseconds per message for each."""
import json
import struct
import sys
import time

import msgpack
import numpy as np

RAW_VIEW = 3


def read_frames(path):
    data = open(path, "rb").read()
    frames, i = [], 0
    while i < len(data):
        (n,) = struct.unpack_from("<I", data, i)
        frames.append(data[i + 4:i + 4 + n])
        i += 4 + n
    return frames


def ext_hook(code, data):
    if code == RAW_VIEW:
        return memoryview(data)
    raise ValueError("ext type %d refused" % code)


def arr(a, aux):
    dtype, shape, data = a
    if isinstance(data, int):
        data = aux[data]
    return np.frombuffer(data, dtype=np.dtype(dtype)).reshape(shape)


def vllm_decode(frames):
    m = msgpack.unpackb(frames[0], ext_hook=ext_hook)
    for o in m[1]:
        if len(o) > 2 and o[2] is not None:
            lp = o[2]
            o[2] = (arr(lp[0], frames), arr(lp[1], frames), arr(lp[2], frames), lp[3])
    return m


def measure(fn, frames, seconds):
    n = 0
    t0 = time.process_time()
    while True:
        for _ in range(50):
            fn(frames)
        n += 50
        t = time.process_time() - t0
        if t >= seconds:
            return t * 1e9 / n, n


def main():
    frames = read_frames(sys.argv[1])
    seconds = float(sys.argv[2])
    unpack_ns, n1 = measure(lambda f: msgpack.unpackb(f[0], ext_hook=ext_hook), frames, seconds)
    vllm_ns, n2 = measure(vllm_decode, frames, seconds)
    print(json.dumps({"unpackb_ns_per_msg": unpack_ns, "unpackb_msgs": n1,
                      "vllm_ns_per_msg": vllm_ns, "vllm_msgs": n2}))


main()

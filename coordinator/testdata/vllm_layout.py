"""Builds DP-coordinator messages exactly as vLLM lays them out, with Python's
msgpack (which picks the same encodings as msgspec for these types), for the
coordinator package's interop test.

  vllm_layout.py gen    print one JSON object per line: a message built here,
                        its hex, and what the Go decoder must make of it
  vllm_layout.py check  read JSON lines {"name", "hex"} of Go encodings on
                        stdin; print {"name", "repr", "same"} where repr is
                        Python's view of the decoded value and same tells
                        whether Python re-encodes it to the identical bytes

Layouts (vllm/v1/engine/__init__.py, vllm/v1/metrics/stats.py at vLLM main of
2026-08-07, checked against bytes vLLM's own code wrote there): EngineCoreOutputs
is a msgspec Struct with array_like=True, which msgspec writes as an array of
all 8 fields (omit_defaults does not shorten array-like structs);
SchedulerStats is a dataclass, which msgspec encodes as a map of every field in
declaration order. The request outputs and utility output inside the
front-end-message cases are short stand-ins: the coordinator only skips them.
"""

import json
import sys

import msgpack

TS = 81234.5678  # an engine's time.monotonic()


def pack(v):
    return msgpack.packb(v, use_bin_type=True)


def eco(engine_index=0, outputs=(), scheduler_stats=None, timestamp=TS,
        utility_output=None, finished_requests=None, wave_complete=None,
        start_wave=None):
    return pack([engine_index, list(outputs), scheduler_stats, timestamp,
                 utility_output, finished_requests, wave_complete, start_wave])


def prefix_cache_stats(requests=0, queries=0, hits=0, reset=False):
    return {"reset": reset, "requests": requests, "queries": queries,
            "hits": hits, "preempted_requests": 0, "preempted_queries": 0,
            "preempted_hits": 0}


def scheduler_stats(running=0, waiting=0, skipped=0, step=0, wave=0, kv=0.0,
                    **override):
    """Every field of the current SchedulerStats dataclass, in order."""
    d = {
        "num_running_reqs": running,
        "num_waiting_reqs": waiting,
        "num_skipped_waiting_reqs": skipped,
        "step_counter": step,
        "current_wave": wave,
        "kv_cache_usage": kv,
        "iteration_details": None,
        "prefix_cache_stats": prefix_cache_stats(),
        "connector_prefix_cache_stats": None,
        "kv_cache_eviction_events": [],
        "spec_decoding_stats": None,
        "kv_connector_stats": None,
        "waiting_lora_adapters": {},
        "running_lora_adapters": {},
        "cudagraph_stats": None,
        "perf_stats": None,
    }
    d.update(override)
    return d


def want(fields, engine=0, outputs=0, stats=None, ts=TS, utility=False,
         finished=None, wave_complete=None, start_wave=None):
    w = {"Fields": fields, "EngineIndex": engine, "OutputsLen": outputs,
         "HasStats": stats is not None, "Timestamp": ts,
         "HasUtilityOutput": utility,
         "HasFinishedRequests": finished is not None,
         "FinishedRequests": finished or 0,
         "HasWaveComplete": wave_complete is not None,
         "WaveComplete": wave_complete or 0,
         "HasStartWave": start_wave is not None,
         "StartWave": start_wave or 0}
    if stats is not None:
        w["Stats"] = stats
    return w


def go_stats(running=0, waiting=0, skipped=0, step=0, wave=0, kv=0.0,
             encoder=0.0):
    return {"NumRunningReqs": running, "NumWaitingReqs": waiting,
            "NumSkippedWaitingReqs": skipped, "StepCounter": step,
            "CurrentWave": wave, "KVCacheUsage": kv,
            "EncoderCacheUsage": encoder}


def gen():
    out = []

    def add(kind, name, raw, expect=None, reason=None):
        case = {"kind": kind, "name": name, "hex": raw.hex()}
        if expect is not None:
            case["want"] = expect
        if reason is not None:
            case["reason"] = reason
        out.append(case)

    # What DPEngineCoreProc._maybe_publish_request_counts sends: the counts,
    # step and wave, KV usage, every other field at its default.
    add("eco", "engine stats, current release",
        eco(3, scheduler_stats=scheduler_stats(running=4, waiting=2, step=17,
                                               wave=5, kv=0.375)),
        want(8, engine=3, stats=go_stats(4, 2, step=17, wave=5, kv=0.375)))

    busy = scheduler_stats(
        running=70000, waiting=300, skipped=2, step=2 ** 40, wave=65536,
        kv=1.0, encoder_cache_usage=0.5,
        prefix_cache_stats=prefix_cache_stats(3, 120, 64),
        connector_prefix_cache_stats=prefix_cache_stats(1, 16, 16, True),
        kv_cache_eviction_events=[
            {"lifetime_seconds": 1.5, "idle_seconds": 0.25,
             "reuse_gaps_seconds": [0.1, 0.2, 0.3]}],
        spec_decoding_stats={"num_spec_tokens": 3, "num_drafts": 10,
                             "num_draft_tokens": 30, "num_accepted_tokens": 21,
                             "num_accepted_tokens_per_pos": [9, 7, 5]},
        kv_connector_stats={"nixl": {"num_successful_transfers": 3,
                                     "transfer_duration": [0.01, 0.02],
                                     "bytes": 2 ** 33}},
        waiting_lora_adapters={"sql-lora": 1},
        running_lora_adapters={"sql-lora": 2, "chat-lora": 5},
        cudagraph_stats={"num_unpadded_tokens": 37, "num_padded_tokens": 40,
                         "num_paddings": 3, "runtime_mode": "FULL"},
        perf_stats={"num_flops_per_gpu": 1.0e12, "num_read_bytes_per_gpu": 2 ** 34},
    )
    add("eco", "busy stats, every field populated",
        eco(200, scheduler_stats=busy, timestamp=5.0e9),
        want(8, engine=200, ts=5.0e9,
             stats=go_stats(70000, 300, 2, 2 ** 40, 65536, 1.0, 0.5)))

    # About vLLM 0.9: no step_counter/current_wave, gpu_cache_usage.
    old = {"num_running_reqs": 1, "num_waiting_reqs": 6,
           "gpu_cache_usage": 0.5, "prefix_cache_stats": prefix_cache_stats(),
           "spec_decoding_stats": None}
    add("eco", "stats, older release", eco(1, scheduler_stats=old),
        want(8, engine=1, stats=go_stats(1, 6)))

    # A fork adding keys the coordinator does not know.
    fork = scheduler_stats(running=2, waiting=1, step=3, wave=1,
                           prefill_alignment_phase=1,
                           prefill_alignment_generation=0,
                           prefill_alignment_ack_generation=-1,
                           prefill_deferred=True)
    add("eco", "stats with unknown fork keys", eco(2, scheduler_stats=fork),
        want(8, engine=2, stats=go_stats(2, 1, step=3, wave=1)))

    add("eco", "wave_complete from rank 0", eco(wave_complete=12),
        want(8, wave_complete=12))
    add("eco", "start_wave from engine 5", eco(5, start_wave=13),
        want(8, engine=5, start_wave=13))
    add("eco", "start_wave 0", eco(1, start_wave=0),
        want(8, engine=1, start_wave=0))
    add("eco", "empty message", eco(), want(8))
    add("eco", "engine 0, no timestamp", pack([]), want(0, ts=0.0))

    # A front-end's message: request outputs and finished request ids.
    outputs = [["req-1", [11, 22, 33]],
               ["req-2", [44], None, None, None, 0, None, None, None, None, 5]]
    add("eco", "request outputs (front-end message)",
        eco(1, outputs=outputs, finished_requests=sorted({"req-2", "req-0"})),
        want(8, engine=1, outputs=2, finished=2))
    add("eco", "utility output",
        eco(1, utility_output=[7, None, [None]]),
        want(8, engine=1, utility=True))

    # Hazards.
    add("eco", "scanner int", pack(0x45), reason="decode")
    add("eco", "a str", pack("junk"), reason="decode")
    add("eco", "a map", pack({"engine_index": 1}), reason="decode")
    add("eco", "count as str",
        eco(1, scheduler_stats=scheduler_stats(running="3")), reason="decode")
    add("eco", "outputs nil", pack([0, None]), reason="decode")
    add("eco", "negative engine index", eco(-1, scheduler_stats=scheduler_stats()),
        reason="validate")
    add("eco", "negative wave_complete", eco(wave_complete=-1), reason="validate")
    add("eco", "NaN kv usage",
        eco(scheduler_stats=scheduler_stats(kv=float("nan"))), reason="validate")
    add("eco", "deep nesting", b"\x91" * 20000 + b"\x01", reason="oversize")
    add("eco", "invalid UTF-8 request id",
        pack([0, [], None, TS, None]).replace(b"\x95", b"\x96", 1) + b"\x91\xa3\xe0\x80\x80",
        reason="decode")

    # Front-end messages (core_client.py's stats task, and hazards).
    add("front", "scale", pack(("SCALE_ELASTIC_EP", 4)),
        {"Kind": 3, "Engines": 4})
    add("front", "wake nil", pack((None, 7)), {"Kind": 4, "Wave": 7})
    add("front", "wake int", pack((2, 7)),
        {"Kind": 4, "Wave": 7, "HasExclude": True, "Exclude": 2})
    add("front", "wake identity", pack(((2).to_bytes(2, "little"), 7)),
        {"Kind": 4, "Wave": 7, "HasExclude": True, "Exclude": 2,
         "ExcludeIdentity": True})
    add("front", "wake identity 300, wave 2**33",
        pack(((300).to_bytes(2, "little"), 2 ** 33)),
        {"Kind": 4, "Wave": 2 ** 33, "HasExclude": True, "Exclude": 300,
         "ExcludeIdentity": True})
    add("front", "subscribe", b"\x01", {"Kind": 1})
    add("front", "unsubscribe", b"\x00", {"Kind": 2})
    add("front", "subscribe with topic", b"\x01topic", {"Kind": 1})
    add("front", "invalid UTF-8 str", b"\xa3\xe0\x80\x80", reason="decode")
    add("front", "map keyed by a map", b"\x81\x80\x01", reason="decode")
    add("front", "20000-deep nesting", b"\x91" * 20000 + b"\x01",
        reason="oversize")
    add("front", "FIRST_REQ (the client's internal message)",
        pack(("FIRST_REQ", (0).to_bytes(2, "little"))), reason="decode")
    add("front", "wrong arity", pack((1, 2, 3)), reason="decode")
    add("front", "bool exclude", pack((True, 7)), reason="decode")
    add("front", "float exclude", pack((1.5, 7)), reason="decode")
    add("front", "float wave", pack((None, 7.0)), reason="decode")
    add("front", "negative wave", pack((None, -1)), reason="validate")
    add("front", "scale to 0", pack(("SCALE_ELASTIC_EP", 0)), reason="validate")
    add("front", "scale to -2", pack(("SCALE_ELASTIC_EP", -2)),
        reason="validate")
    add("front", "3-byte identity", pack((b"\x01\x02\x03", 7)),
        reason="decode")
    add("front", "nil", pack(None), reason="decode")

    for case in out:
        print(json.dumps(case))


def check():
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        case = json.loads(line)
        raw = bytes.fromhex(case["hex"])
        value = msgpack.unpackb(raw, raw=False, strict_map_key=False)
        same = pack(value) == raw
        print(json.dumps({"name": case["name"], "repr": repr(value),
                          "same": same}))


if __name__ == "__main__":
    {"gen": gen, "check": check}[sys.argv[1]]()

"""Issue 23's single-message attacks against running `zmqguard coordinator`
processes (loopback only, bounded: about 10 s per binary).

  /usr/bin/python3 reliability/coordinator_wedges.py NAME=BINARY[:EXTRA-FLAGS] ...

e.g. `before=/tmp/zmqguard-old:--publish-kv-cache-usage after=/tmp/zmqguard`.
For each binary it starts a coordinator with 2 engines (pyzmq peers) and
prints one JSON line: the stats freeze (one forged stats message, then 10
real ones 100 ms apart: the engine-1 counts front-ends saw), the wave
freeze (wave_complete = 2^63-2, then two wakes: START_DP_WAVE copies the
engines got), the resize from anyone (SCALE_ELASTIC_EP 4096: the largest
publication in the next 6 s), and the process's own counters.
"""
import json, os, subprocess, sys, time, socket as pysock
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "coordinator", "testdata"))
import msgpack, zmq
from vllm_layout import eco, scheduler_stats

def port():
    s = pysock.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def run(binary, extra):
    fp, op, bp = port(), port(), port()
    args = [binary, "coordinator", "--front", "tcp://127.0.0.1:%d" % fp, "--back-output", "tcp://127.0.0.1:%d" % op,
            "--back-publish", "tcp://127.0.0.1:%d" % bp, "--engines", "2", "--log-level", "error"] + extra
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    ctx = zmq.Context(); ctx.setsockopt(zmq.LINGER, 0)
    front = ctx.socket(zmq.XSUB); front.connect("tcp://127.0.0.1:%d" % fp); front.send(b"\x01")
    subs = []
    for _ in range(2):
        s = ctx.socket(zmq.XSUB); s.connect("tcp://127.0.0.1:%d" % bp); s.send(b"\x01"); subs.append(s)
    for s in subs:
        assert s.poll(5000); s.recv_multipart()
    push = ctx.socket(zmq.PUSH); push.connect("tcp://127.0.0.1:%d" % op)
    out = {}
    def pubs(seconds):
        end, got = time.monotonic() + seconds, []
        while time.monotonic() < end:
            if front.poll(50):
                got.append(front.recv())
        return got
    # 1. Stats freeze: one forged message, then 10 real ones (100 ms apart).
    push.send(eco(1, scheduler_stats=scheduler_stats(waiting=424242, step=2**63 - 2, wave=2**63 - 2)))
    time.sleep(0.2)
    first_real = None
    seen = []
    for k in range(1, 11):
        push.send(eco(1, scheduler_stats=scheduler_stats(waiting=k, running=1, step=k, wave=0)))
        for p in pubs(0.1):
            m = msgpack.unpackb(p, raw=False)
            if m[0] is not None:
                seen.append(m[0][1][0])
            if m[0] is not None and m[0][1][0] == k and first_real is None:
                first_real = k
    out["freeze_first_real_message_taken"] = first_real
    out["freeze_engine1_waiting_seen"] = seen[:12]
    # 2. Wave stuck: wave_complete = 2^63-2, then a wake; is running ever published true?
    push.send(eco(0, wave_complete=2**63 - 2))
    time.sleep(0.2)
    front.send(msgpack.packb([None, 0]))
    got = [msgpack.unpackb(p, raw=False) for p in pubs(0.5)]
    out["stuck_wave_after"] = got[-1][1] if got else None
    push.send(eco(0, wave_complete=got[-1][1] if got else 0))
    time.sleep(0.2)
    front.send(msgpack.packb([None, got[-1][1] if got else 0]))
    starts = 0
    for s in subs:
        while s.poll(300):
            f = s.recv_multipart()
            if f[0] == b"\x02":
                starts += 1
    out["start_dp_wave_at_engines_after_attack"] = starts
    # 3. Resize from anyone: SCALE_ELASTIC_EP 4096, size of the next publications.
    front.send(msgpack.packb(["SCALE_ELASTIC_EP", 4096]))
    sizes = [len(p) for p in pubs(6.0)]
    out["publication_bytes_after_scale_4096"] = max(sizes) if sizes else None
    for sk in [front, push] + subs:
        sk.close()
    proc.terminate()
    line = proc.communicate(timeout=20)[0].decode().strip().splitlines()[-1]
    st = json.loads(line)
    out.update({k: st.get(k) for k in ("engines", "stale_stats", "stats_resyncs", "wave_jumps", "resizes")})
    ctx.term()
    return out

for arg in sys.argv[1:]:
    name, spec = arg.split("=", 1)
    binary, _, flags = spec.partition(":")
    print(name, json.dumps(run(binary, flags.split() if flags else [])), flush=True)

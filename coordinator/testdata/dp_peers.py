"""Python DP peers (pyzmq on libzmq, Python msgpack) against a running
coordinator, for the coordinator package's interop test.

  dp_peers.py '{"front": ..., "back_output": ..., "back_publish": ...,
                "engines": N, "release": "old" | "latest"}'

Plays N engine cores (an XSUB on the back publish socket that sends b"\\x01"
and waits for READY, and a PUSH on the back output socket, as vLLM's
DPEngineCoreProc does) and one API front-end (an XSUB on the front publish
socket). Engine messages are EngineCoreOutputs laid out as vLLM lays them
out (vllm_layout.py: array_like struct, the full SchedulerStats map).

The front-end unpacks every stats publication as the release's front-end
does: two values per engine ("old", vLLM before PR #49204) or three
("latest", `waiting, running, kv_cache_usage = entry`); a publication of the
other layout fails the run, as it fails that front-end's routing.

Steps: READY at every engine; stats from every engine until the front-end
sees them; a front-end wake-up naming engine 1 by its 2-byte identity ->
START_DP_WAVE(0, 1) at every engine and, for "old", (None, 0, True) at the
front-end. For "latest" (vLLM PR #51481) no publication may claim running
after the wake until DP rank 0 reports start_wave=0, which gives
START_DP_WAVE(0, 0) and (None, 0, True). Then wave_complete=0 from engine 0
-> (None, 1, False), and for "latest" no publication claims running during
the pause that follows; start_wave=2 from engine 1 -> START_DP_WAVE(2, 1)
and (None, 2, True). Prints one JSON object with what each peer received;
exits non-zero with a message on stderr if a step times out or a check
fails.
"""

import json
import os
import sys
import time

import msgpack
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vllm_layout import eco, scheduler_stats  # noqa: E402

TIMEOUT_MS = 15000


def fail(msg):
    sys.stderr.write("dp_peers.py: " + msg + "\n")
    sys.exit(1)


def recv(sock, what):
    if not sock.poll(TIMEOUT_MS):
        fail("timed out waiting for " + what)
    return sock.recv_multipart()


def main():
    cfg = json.loads(sys.argv[1])
    n = cfg["engines"]
    latest = cfg.get("release", "old") == "latest"
    ctx = zmq.Context()
    ctx.setsockopt(zmq.LINGER, 0)
    out = {}

    front = ctx.socket(zmq.XSUB)
    front.connect(cfg["front"])
    front.send(b"\x01")

    subs, pushes = [], []
    for _ in range(n):
        sub = ctx.socket(zmq.XSUB)
        sub.connect(cfg["back_publish"])
        sub.send(b"\x01")
        push = ctx.socket(zmq.PUSH)
        push.connect(cfg["back_output"])
        subs.append(sub)
        pushes.append(push)

    out["ready"] = []
    for i, sub in enumerate(subs):
        frames = recv(sub, "READY at engine %d" % i)
        out["ready"].append([f.decode("latin-1") for f in frames])

    # Each engine reports its queues with every SchedulerStats field.
    want = [[i + 5, 2 * i + 1] for i in range(n)]
    if latest:
        want = [w + [0.125 * (i + 1)] for i, w in enumerate(want)]
    for i, push in enumerate(pushes):
        st = scheduler_stats(running=want[i][1], waiting=want[i][0], step=3,
                             wave=0, kv=0.125 * (i + 1))
        push.send(eco(i, scheduler_stats=st))

    out["unpacked"] = 0

    def next_pub(what, timeout_ms=TIMEOUT_MS):
        if not front.poll(timeout_ms):
            if timeout_ms != TIMEOUT_MS:
                return None
            fail("timed out waiting for " + what)
        frames = front.recv_multipart()
        if len(frames) != 1:
            fail("publication of %d frames" % len(frames))
        pub = msgpack.unpackb(frames[0], raw=False)
        counts, _wave, _running = pub
        if counts is not None:
            # What the release's front-end does with every entry.
            for entry in counts:
                if latest:
                    waiting, running, kv = entry
                    if not isinstance(kv, float):
                        fail("kv_cache_usage %r is not a float" % (kv,))
                else:
                    waiting, running = entry
            out["unpacked"] += 1
        return pub

    def never_running(ms, what):
        """Every publication for ms milliseconds says not running."""
        end = time.monotonic() + ms / 1000.0
        seen = 0
        while True:
            left = int((end - time.monotonic()) * 1000)
            if left <= 0:
                break
            pub = next_pub(what, left)
            if pub is None:
                break
            seen += 1
            if pub[2]:
                fail("%s: publication %r claims running" % (what, pub))
        return seen

    while True:
        pub = next_pub("stats publication")
        if pub[0] is not None and pub[0] == want:
            out["stats"] = pub
            break

    def wait_wave(wave, running):
        while True:
            pub = next_pub("wave publication (%d, %s)" % (wave, running))
            if pub[0] is None and pub[1] == wave and pub[2] == running:
                return pub

    def start_waves(what):
        got = []
        for i, sub in enumerate(subs):
            frames = recv(sub, "%s at engine %d" % (what, i))
            while frames == [b"READY"]:
                frames = recv(sub, "%s at engine %d" % (what, i))
            if len(frames) != 2 or frames[0] != b"\x02":
                fail("engine %d: unexpected message %r" % (i, frames[:1]))
            wave, exclude = msgpack.unpackb(frames[1], raw=False)
            if isinstance(exclude, bytes):
                # The identity a front-end sent, forwarded as it came
                # (vLLM's coordinator does not convert it).
                exclude = {"hex": exclude.hex()}
            got.append([wave, exclude])
        return got

    # A front-end sends a request to engine 1 while the engines are paused
    # and tells the coordinator, naming engine 1 by its identity.
    front.send(msgpack.packb([(1).to_bytes(2, "little"), 0],
                             use_bin_type=True))
    out["wake_start"] = start_waves("START_DP_WAVE after wake-up")
    if latest:
        # The engines are paused and discard START_DP_WAVE: nothing may
        # claim running until rank 0 says the wave started.
        out["after_wake_pubs"] = never_running(600, "after the wake")
        pushes[0].send(eco(0, start_wave=0))
        out["rank0_start"] = start_waves("START_DP_WAVE after rank 0 start_wave")
    out["wake_pub"] = wait_wave(0, True)

    # Rank 0 reports that wave 0 is complete.
    pushes[0].send(eco(0, wave_complete=0))
    out["complete_pub"] = wait_wave(1, False)
    if latest:
        out["pause_pubs"] = never_running(600, "during the pause")

    # Engine 1 received a request for wave 2 while paused.
    pushes[n - 1].send(eco(n - 1, start_wave=2))
    out["engine_start"] = start_waves("START_DP_WAVE after start_wave")
    out["engine_start_pub"] = wait_wave(2, True)

    print(json.dumps(out))
    for s in [front] + subs + pushes:
        s.close()
    ctx.term()


if __name__ == "__main__":
    main()

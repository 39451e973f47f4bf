#!/usr/bin/env python3
"""Replays the seeds' eight scenarios against a running zmqguard coordinator
and handshake listener over TCP, as libzmq peers (pyzmq), the way the seeds'
evidence was gathered: "we replayed the frames our deployment had received
against a real Coordinator and NIXL listener bound to TCP".

The coordinator must be fresh (started with --engines 1, no engine connected
yet) because scenario 8 subscribes a stray peer before the engine does. This
script plays the only engine; it may share the front publish socket with
other front-ends.

Each scenario sends its junk and then, on the same connection where ZeroMQ
keeps order, valid traffic whose effect proves the receive loop handled the
junk and is still serving. It prints one line per scenario, "PASS n name" or
"FAIL n name: why", and last one JSON line {"sent": ...} counting every
message it sent, valid and junk by kind, per target socket. Exit status 0 iff
all eight pass.

Needs Debian's python3-zmq and python3-msgpack (run with /usr/bin/python3).
"""

import argparse
import json
import sys
import time
import traceback

import msgpack
import zmq

GET_META_MSG = b"get_meta_msg"
ERROR_PREFIX = "zmqguard-error: "
TIMEOUT_MS = 15000  # generous: CI runs this under -race next to other tests


def pack(obj):
    return msgpack.packb(obj, use_bin_type=True)


def unpack(b):
    return msgpack.unpackb(b, raw=False, strict_map_key=False)


class Failed(Exception):
    pass


class Replay:
    def __init__(self, args):
        self.args = args
        self.ctx = zmq.Context()
        self.sent = {
            s: {"valid": 0, "junk": {}}
            for s in ("listener", "front", "back_output", "back_publish")
        }
        self.step = 0
        self.wave = 0
        self.waiting = 0
        self.results = []
        self.engine_sub = None
        self.engine_push = None
        self.front = None

    # --- bookkeeping -----------------------------------------------------
    def valid(self, target, n=1):
        self.sent[target]["valid"] += n

    def junk(self, target, kind):
        j = self.sent[target]["junk"]
        j[kind] = j.get(kind, 0) + 1

    def socket(self, kind, endpoint, monitor_events=None):
        """A connected socket; with monitor_events, (socket, monitor), the
        monitor attached before the connect so that no event can come
        before it (a loaded machine may finish the handshake first)."""
        s = self.ctx.socket(kind)
        s.setsockopt(zmq.LINGER, 2000)
        s.setsockopt(zmq.RCVTIMEO, TIMEOUT_MS)
        s.setsockopt(zmq.SNDTIMEO, TIMEOUT_MS)
        mon = None
        if monitor_events is not None:
            mon = s.get_monitor_socket(monitor_events)
        s.connect(endpoint)
        if mon is not None:
            return s, mon
        return s

    # --- listener helpers ------------------------------------------------
    def check_payload(self, payload):
        p = unpack(payload)
        if not isinstance(p, dict):
            raise Failed("payload is not a map")
        h = p.get("compatibility_hash")
        if self.args.compat_hash and h != self.args.compat_hash:
            raise Failed("compatibility hash %r" % (h,))
        md = unpack(p["agent_metadata_bytes"])
        if md.get("engine_id") != self.args.engine_id:
            raise Failed("engine_id %r" % (md.get("engine_id"),))

    def handshake(self):
        """One V3 handshake as vLLM's decode worker does it: a fresh REQ."""
        req = self.socket(zmq.REQ, self.args.listener)
        try:
            req.send(pack([GET_META_MSG, 0, 0]))
            self.valid("listener")
            frames = req.recv_multipart()
        finally:
            req.close()
        if len(frames) != 2:
            raise Failed("V3 reply has %d frames after the delimiter" % len(frames))
        self.check_payload(frames[0])
        if not isinstance(unpack(frames[1]), float):
            raise Failed("timestamp frame is not a float")

    def dealer_handshake(self, dealer):
        """A valid request on a DEALER that imitates a REQ (delimiter first)."""
        dealer.send_multipart([b"", pack([GET_META_MSG, 0, 0])])
        self.valid("listener")
        frames = dealer.recv_multipart()
        if len(frames) != 3 or frames[0] != b"":
            raise Failed("reply to the DEALER has %d frames" % len(frames))
        self.check_payload(frames[1])

    # --- coordinator helpers ---------------------------------------------
    def next_publication(self, want, what):
        """Receives publications until want(counts, wave, running) holds."""
        deadline = time.monotonic() + TIMEOUT_MS / 1000
        seen = None
        while time.monotonic() < deadline:
            try:
                msg = self.front.recv()
            except zmq.Again:
                break
            seen = unpack(msg)
            if want(*seen):
                return seen
        raise Failed("no publication with %s (last seen %r)" % (what, seen))

    def send_stats(self, waiting, running):
        self.step += 1
        stats = {
            "num_running_reqs": running,
            "num_waiting_reqs": waiting,
            "step_counter": self.step,
            "current_wave": self.wave,
        }
        self.engine_push.send(pack([0, [], stats, time.monotonic()]))
        self.valid("back_output")

    def stats_flow(self):
        """New stats from the engine reach the front-end."""
        self.waiting += 1
        w = self.waiting
        self.send_stats(w, 1)
        self.next_publication(
            lambda counts, wave, running: counts is not None
            and len(counts) == 1
            and counts[0][:2] == [w, 1],
            "counts [[%d, 1]]" % w,
        )

    def wake_cycle(self):
        """A front-end wake-up broadcasts START_DP_WAVE; DP rank 0 reports the
        wave's start (start_wave), which the front-ends see as a wave
        publication and the engines as a second START_DP_WAVE; the engine's
        wave_complete ends it. (Current vLLM, PR #51481: the wake alone does
        not set running.)"""
        wave = self.wave
        self.front.send(pack([None, wave]))
        self.valid("front")
        self.expect_start_wave(wave, None)
        self.engine_push.send(pack([0, [], None, time.monotonic(), None, None, None, wave]))
        self.valid("back_output")
        self.next_publication(
            lambda counts, w, running: counts is None and w == wave and running,
            "wave %d running" % wave,
        )
        self.expect_start_wave(wave, 0)
        self.engine_push.send(pack([0, [], None, time.monotonic(), None, None, wave]))
        self.valid("back_output")
        self.next_publication(
            lambda counts, w, running: counts is None and w == wave + 1 and not running,
            "wave %d paused" % (wave + 1),
        )
        self.wave = wave + 1
        self.step = 0

    def expect_start_wave(self, wave, exclude):
        frames = self.engine_sub.recv_multipart()
        while frames == [b"READY"]:  # re-subscriptions of other engines
            frames = self.engine_sub.recv_multipart()
        if frames[0] != b"\x02" or unpack(frames[1]) != [wave, exclude]:
            raise Failed("engine got %r instead of START_DP_WAVE(%d, %r)" % (frames, wave, exclude))

    # --- the scenarios ---------------------------------------------------
    def s8_stray_subscription_at_startup(self):
        stray, mon = self.socket(zmq.SUB, self.args.back_publish, zmq.EVENT_HANDSHAKE_SUCCEEDED)
        stray.setsockopt(zmq.SUBSCRIBE, b"probe")
        self.junk("back_publish", "subscribe-topic")
        if not mon.poll(TIMEOUT_MS):
            raise Failed("stray subscriber never connected")
        stray.disable_monitor()
        if self.args.sync_stdin:
            # The harness watches the coordinator's log and answers once the
            # stray subscription has been dropped there: only then does the
            # engine subscribe, so the stray one surely came during start-up.
            print("SYNC stray-subscribed", flush=True)
            if not sys.stdin.readline():
                raise Failed("the harness closed stdin instead of answering")
        else:
            # Give the subscription time to reach the coordinator before the
            # engine's (the seed's test sleeps too).
            time.sleep(0.5)
        mon.close()
        self.engine_sub = self.socket(zmq.XSUB, self.args.back_publish)
        self.engine_sub.send(b"\x01")
        self.valid("back_publish")
        msg = self.engine_sub.recv_multipart()
        if msg != [b"READY"]:
            raise Failed("engine got %r instead of READY" % (msg,))
        # The stray takes its topic back before it goes, so that the socket
        # has nothing to report on its departure: every junk frame is sent.
        stray.setsockopt(zmq.UNSUBSCRIBE, b"probe")
        self.junk("back_publish", "unsubscribe-topic")
        stray.close()

    def setup_engine_and_front(self):
        self.engine_push = self.socket(zmq.PUSH, self.args.back_output)
        self.front = self.socket(zmq.XSUB, self.args.front)
        self.front.send(b"\x01")
        self.valid("front")
        self.stats_flow()

    def s4_undecodable_engine_frame(self):
        # Typed decoding fails: engine_index is a str (msgspec raised
        # ValidationError and the coordinator died).
        self.engine_push.send(pack(["0", [], None, 1.0]))
        self.junk("back_output", "engine-wrong-type")
        # Not msgpack at all.
        self.engine_push.send(b"\xc1\x00")
        self.junk("back_output", "engine-undecodable")
        self.stats_flow()

    def s5_int_frame(self):
        # The scanner's frame: "Expected `array`, got `int`".
        self.engine_push.send(b"\x45")
        self.junk("back_output", "int-frame")
        self.stats_flow()

    def s6_front_invalid_utf8_and_map_key(self):
        self.front.send(b"\xa3\xe0\x80\x80")  # UnicodeDecodeError in msgspec
        self.junk("front", "invalid-utf8")
        self.front.send(b"\x81\x80\x01")  # TypeError: unhashable map key
        self.junk("front", "map-keyed-map")
        self.wake_cycle()

    def s7_front_deep_nesting(self):
        self.front.send(b"\x91" * 20000 + b"\x01")  # RecursionError
        self.junk("front", "deep-nesting")
        self.wake_cycle()
        self.stats_flow()

    def s1_stray_bare_dealer(self):
        dealer = self.socket(zmq.DEALER, self.args.listener)
        try:
            dealer.send(pack([GET_META_MSG, 0, 0]))  # no delimiter
            self.junk("listener", "bare-dealer")
            self.dealer_handshake(dealer)
        finally:
            dealer.close()
        self.handshake()

    def s2_malformed_handshake(self):
        dealer = self.socket(zmq.DEALER, self.args.listener)
        try:
            dealer.send_multipart([b"", b"\xc1"])
            self.junk("listener", "undecodable")
            dealer.send_multipart([b"", b"\x93\xc4\x0c"])  # truncated
            self.junk("listener", "truncated")
            dealer.send_multipart([b"", pack([GET_META_MSG])])  # wrong arity
            self.junk("listener", "wrong-arity")
            dealer.send_multipart([b"", pack([GET_META_MSG, "0", 0])])  # wrong type
            self.junk("listener", "wrong-type")
            self.dealer_handshake(dealer)
        finally:
            dealer.close()
        self.handshake()

    def s3_unknown_rank(self):
        req = self.socket(zmq.REQ, self.args.listener)
        try:
            req.send(pack([GET_META_MSG, 0, 7]))
            self.junk("listener", "unknown-rank")
            frames = req.recv_multipart()
        finally:
            req.close()
        if len(frames) != 2:
            raise Failed("error reply has %d frames" % len(frames))
        h = unpack(frames[0]).get("compatibility_hash", "")
        if not h.startswith(ERROR_PREFIX):
            raise Failed("no explicit error reply: hash %r" % (h,))
        self.handshake()

    def run(self):
        scenarios = [
            (8, "stray-subscription-during-startup", self.s8_stray_subscription_at_startup),
            (0, "setup: engine stats reach a front-end", self.setup_engine_and_front),
            (4, "undecodable-engine-frame", self.s4_undecodable_engine_frame),
            (5, "int-frame-on-engine-output", self.s5_int_frame),
            (6, "front-invalid-utf8-and-map-keyed-map", self.s6_front_invalid_utf8_and_map_key),
            (7, "front-deep-nesting", self.s7_front_deep_nesting),
            (1, "stray-bare-dealer", self.s1_stray_bare_dealer),
            (2, "malformed-handshake-content", self.s2_malformed_handshake),
            (3, "unknown-rank", self.s3_unknown_rank),
        ]
        passed = 0
        for n, name, fn in scenarios:
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - a scenario's failure is reported
                detail = str(e) if isinstance(e, Failed) else traceback.format_exc().strip().splitlines()[-1]
                print("FAIL %d %s: %s" % (n, name, detail), flush=True)
                if n == 0 or n == 8:
                    break  # everything after needs the engine
                continue
            if n:
                passed += 1
                print("PASS %d %s" % (n, name), flush=True)
        for s in (self.engine_sub, self.engine_push, self.front):
            if s is not None:
                s.close()
        self.ctx.term()
        print(json.dumps({"passed": passed, "sent": self.sent}), flush=True)
        return passed == 8


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--listener", required=True, help="handshake listener endpoint")
    ap.add_argument("--front", required=True, help="coordinator front publish endpoint")
    ap.add_argument("--back-output", required=True, help="coordinator back output endpoint")
    ap.add_argument("--back-publish", required=True, help="coordinator back publish endpoint")
    ap.add_argument("--engine-id", required=True, help="the listener's engine id")
    ap.add_argument("--compat-hash", default="", help="the listener's compatibility hash")
    ap.add_argument("--sync-stdin", action="store_true",
                    help="after the stray subscription, print 'SYNC stray-subscribed' and wait for a line on stdin")
    args = ap.parse_args()
    sys.exit(0 if Replay(args).run() else 1)


if __name__ == "__main__":
    main()

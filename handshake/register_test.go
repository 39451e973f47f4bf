package handshake

import (
	"strings"
	"testing"

	"github.com/zmqguard/zmqguard/internal/stack/msgpscan"
)

// TestPushRegistrationRefused: a push-mode decode side (vLLM PR #35264)
// registers its blocks on the prefill side channel with (REGISTER_BLOCKS_MSG,
// {...}) from a REQ and waits 5 s for {"status": "success", ...}. The
// listener serves metadata only: it refuses at once with {"status":
// "error", "message": ...}, which the decode side handles as a failed
// registration, instead of letting it time out. A pyzmq REQ plays the
// decode side, with the message constant in both encodings (bin, str), and
// then a normal handshake on a new REQ still works.
func TestPushRegistrationRefused(t *testing.T) {
	requirePython(t, "zmq, msgpack")
	l := startListener(t, ListenerConfig{})
	script := `import sys, time, zmq, msgpack
ep = sys.argv[1] if len(sys.argv) > 1 else None
ctx = zmq.Context()
for msg_type in (b"register_blocks_msg", "register_blocks_msg"):
    s = ctx.socket(zmq.REQ)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVTIMEO, 5000)
    s.connect(EP)
    reg = {"request_id": "cmpl-1", "decode_request_id": "cmpl-1-d", "decode_engine_id": "decode-0",
           "decode_tp_size": 1, "local_block_ids": [[3, 4, 5]], "num_blocks": 3,
           "remote_host": "127.0.0.1", "remote_port": 5601}
    t0 = time.monotonic()
    s.send(msgpack.packb((msg_type, reg), use_bin_type=True))
    try:
        ack = msgpack.unpackb(s.recv(), raw=False)
    except zmq.Again:
        print("TIMEOUT")
        continue
    print("%s %s %.3f" % (ack.get("status"), ack.get("message", "").replace(" ", "_"), time.monotonic() - t0))
    s.close()
s = ctx.socket(zmq.REQ)
s.setsockopt(zmq.RCVTIMEO, 5000)
s.connect(EP)
s.send(msgpack.packb((b"get_meta_msg", 0, 0), use_bin_type=True))
print("meta", len(s.recv_multipart()))
`
	out := string(runPython(t, strings.Replace(script, "EP)", "'"+l.Endpoint()+"')", -1), nil))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("python printed:\n%s", out)
	}
	for _, line := range lines[:2] {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "error" || !strings.HasPrefix(f[1], "zmqguard-error:") {
			t.Errorf("registration reply %q, want an explicit error", line)
		}
	}
	if lines[2] != "meta 2" { // payload and timestamp
		t.Errorf("handshake after the registrations: %q", lines[2])
	}
	if st := l.Stats(); st.RegistrationsRefused != 2 || totalServed(st) != 1 || st.Loop.Dropped.Total() != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// FuzzIsRegistration: the registration recogniser never panics, and what
// it accepts is well-formed msgpack that ParseRequest refuses.
func FuzzIsRegistration(f *testing.F) {
	f.Add([]byte("\x92\xc4\x13register_blocks_msg\x81\xaarequest_id\xa6cmpl-1"))
	f.Add([]byte("\x92\xb3register_blocks_msg\x82\xa1x\x01\xaarequest_id\x01"))
	f.Add([]byte("\x93\xc4\x0cget_meta_msg\x00\x01"))
	f.Add([]byte("\x92\xc4\x01x\x81\x01\x02"))
	f.Add([]byte{0x45})
	f.Fuzz(func(t *testing.T, b []byte) {
		if !isRegistration(b) {
			return
		}
		if err := msgpscan.Scan(b, &registrationLimits); err != nil {
			t.Fatalf("accepted a frame the pre-scan refuses: %v", err)
		}
		if _, err := parseRequest(b); err == nil {
			t.Fatal("a valid handshake request taken for a registration")
		}
	})
}

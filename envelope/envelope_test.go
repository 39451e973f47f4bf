package envelope

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/zmqguard/zmqguard/decodeguard"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func fr(ss ...string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

func nFrames(n int, fill string) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = []byte(fill)
	}
	return out
}

// withShape returns [identity, "", body x nBody].
func withShape(nBody int) [][]byte {
	return append(fr("id", ""), nFrames(nBody, "b")...)
}

func sameFrames(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func TestParseMalformed(t *testing.T) {
	tooMany := withShape(defaultMaxFrames - 1) // 65 frames
	tests := []struct {
		name   string
		frames [][]byte
		opt    *Options
		reason decodeguard.Reason
		want   []string // substrings of the error message
	}{
		{"nil frames", nil, nil, decodeguard.ReasonEnvelope, []string{"envelope: no frames"}},
		{"zero frames", [][]byte{}, nil, decodeguard.ReasonEnvelope, []string{"no frames"}},
		{"nil frames lenient", nil, &Options{Lenient: true}, decodeguard.ReasonEnvelope, []string{"no frames"}},
		{"empty identity", fr("", "", "body"), nil, decodeguard.ReasonEnvelope, []string{"empty identity frame"}},
		{"nil identity", [][]byte{nil, {}, []byte("b")}, nil, decodeguard.ReasonEnvelope, []string{"empty identity frame"}},
		{"empty identity lenient", fr("", "body"), &Options{Lenient: true}, decodeguard.ReasonEnvelope, []string{"empty identity frame"}},
		{"identity too long", [][]byte{bytes.Repeat([]byte{7}, 256), {}, []byte("b")}, nil,
			decodeguard.ReasonOversize, []string{"oversize: identity frame is 256 bytes, limit 255"}},
		{"identity over custom limit", fr("abcdef", "", "b"), &Options{MaxIdentity: 5},
			decodeguard.ReasonOversize, []string{"identity frame is 6 bytes, limit 5"}},
		{"identity alone", fr("id"), nil, decodeguard.ReasonEnvelope,
			[]string{"no empty delimiter frame after the identity", "identity frame alone"}},
		{"bare DEALER shape", fr("id", "get_meta_msg"), nil, decodeguard.ReasonEnvelope,
			[]string{"no empty delimiter frame after the identity", "second frame is non-empty (12 bytes, hex 6765745f6d657461...)",
				"bare DEALER", "Options.Lenient"}},
		{"bare DEALER two body frames", fr("id", "a", "b"), nil, decodeguard.ReasonEnvelope,
			[]string{"second frame is non-empty (1 bytes, hex 61)", "bare DEALER"}},
		{"no body", fr("id", ""), nil, decodeguard.ReasonEnvelope,
			[]string{"too few body frames: got 0, want at least 1"}},
		{"too few body custom", withShape(2), &Options{MinBody: 3}, decodeguard.ReasonEnvelope,
			[]string{"too few body frames: got 2, want at least 3"}},
		{"too few body lenient", fr("id", "a"), &Options{Lenient: true, MinBody: 2}, decodeguard.ReasonEnvelope,
			[]string{"too few body frames: got 1, want at least 2"}},
		{"identity alone lenient", fr("id"), &Options{Lenient: true}, decodeguard.ReasonEnvelope,
			[]string{"too few body frames: got 0, want at least 1"}},
		{"too many body", withShape(3), &Options{MaxBody: 2}, decodeguard.ReasonEnvelope,
			[]string{"too many body frames: got 3, want at most 2"}},
		{"too many body lenient", fr("id", "a", "b", "c"), &Options{Lenient: true, MaxBody: 2}, decodeguard.ReasonEnvelope,
			[]string{"too many body frames: got 3, want at most 2"}},
		{"too many frames", tooMany, nil, decodeguard.ReasonOversize,
			[]string{"oversize: message has 65 frames, limit 64"}},
		{"too many frames custom", withShape(3), &Options{MaxFrames: 4}, decodeguard.ReasonOversize,
			[]string{"message has 5 frames, limit 4"}},
		// The frame-count limit is checked before anything else in the message.
		{"too many frames beats empty identity", append([][]byte{nil}, nFrames(64, "x")...), nil,
			decodeguard.ReasonOversize, []string{"65 frames, limit 64"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env, err := Parse(tc.frames, tc.opt)
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", env)
			}
			var de *decodeguard.Error
			if !errors.As(err, &de) {
				t.Fatalf("error %T %v is not a *decodeguard.Error", err, err)
			}
			if de.Reason != tc.reason {
				t.Errorf("reason = %v, want %v (%v)", de.Reason, tc.reason, err)
			}
			if !decodeguard.IsBadInput(err) || !errors.Is(err, &decodeguard.Error{Reason: tc.reason}) {
				t.Errorf("error %v not classified as %v bad input", err, tc.reason)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if env.Identity != nil || env.Body != nil || env.Delimited {
				t.Errorf("failed Parse returned a non-zero Envelope %+v", env)
			}
		})
	}
}

func TestParseErrorNeverCarriesRawBytes(t *testing.T) {
	hostile := []byte("\x1b]0;pwned\x07\x1b[2J\xff\xfe")
	_, err := Parse([][]byte{[]byte("id"), hostile}, nil)
	if err == nil {
		t.Fatal("want an error")
	}
	msg := err.Error()
	for i := 0; i < len(msg); i++ {
		if c := msg[i]; c < 0x20 || c > 0x7e {
			t.Fatalf("error message has byte %#x at %d: %q", c, i, msg)
		}
	}
	if !strings.Contains(msg, "16 bytes, hex 1b5d303b70776e65...") {
		t.Errorf("error %q lacks length and hex prefix", msg)
	}
}

func TestParseWellFormed(t *testing.T) {
	tests := []struct {
		name      string
		frames    [][]byte
		opt       *Options
		delimited bool
		body      [][]byte
	}{
		{"REQ one body", fr("id", "", "get_meta_msg"), nil, true, fr("get_meta_msg")},
		{"REQ two body", fr("id", "", "payload", "ts"), nil, true, fr("payload", "ts")},
		{"empty body frame", fr("id", "", ""), nil, true, fr("")},
		{"identity at limit", [][]byte{bytes.Repeat([]byte{0}, 255), {}, []byte("b")}, nil, true, fr("b")},
		{"frames at limit", withShape(62), nil, true, nFrames(62, "b")},
		{"body at custom max", withShape(2), &Options{MaxBody: 2}, true, nFrames(2, "b")},
		{"no body allowed", fr("id", ""), &Options{MinBody: -1}, true, nil},
		{"lenient delimited", fr("id", "", "x"), &Options{Lenient: true}, true, fr("x")},
		{"lenient DEALER", fr("id", "get_meta_msg"), &Options{Lenient: true}, false, fr("get_meta_msg")},
		{"lenient DEALER many", fr("id", "a", "", "c"), &Options{Lenient: true}, false, fr("a", "", "c")},
		{"lenient identity only, no body allowed", fr("id"), &Options{Lenient: true, MinBody: -1}, false, nil},
		{"lenient at frame limit", append(fr("id"), nFrames(63, "b")...), &Options{Lenient: true}, false, nFrames(63, "b")},
		{"zero Options", fr("id", "", "x"), &Options{}, true, fr("x")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env, err := Parse(tc.frames, tc.opt)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !bytes.Equal(env.Identity, tc.frames[0]) {
				t.Errorf("identity = %x, want %x", env.Identity, tc.frames[0])
			}
			if env.Delimited != tc.delimited {
				t.Errorf("Delimited = %v, want %v", env.Delimited, tc.delimited)
			}
			if !sameFrames(env.Body, tc.body) {
				t.Errorf("body = %q, want %q", env.Body, tc.body)
			}
		})
	}
}

func TestParseAliasesAndClipsCapacity(t *testing.T) {
	backing := make([]byte, 0, 16)
	backing = append(backing, "identity"...)
	frames := make([][]byte, 3, 8)
	frames[0], frames[1], frames[2] = backing[:2], []byte{}, []byte("body")
	spare := frames[:4]
	spare[3] = []byte("not mine")

	env, err := Parse(frames, nil)
	if err != nil {
		t.Fatal(err)
	}
	if &env.Identity[0] != &frames[0][0] || &env.Body[0][0] != &frames[2][0] {
		t.Fatal("Envelope does not alias the input frames")
	}
	if cap(env.Identity) != len(env.Identity) || cap(env.Body) != len(env.Body) {
		t.Fatalf("capacity not clipped: identity %d/%d body %d/%d",
			len(env.Identity), cap(env.Identity), len(env.Body), cap(env.Body))
	}
	_ = append(env.Identity, 'X')
	_ = append(env.Body, []byte("X"))
	if string(backing[:8]) != "identity" || string(spare[3]) != "not mine" {
		t.Fatal("appending to the Envelope overwrote the caller's memory")
	}
}

func TestReply(t *testing.T) {
	del, err := Parse(fr("peer-1", "", "req"), nil)
	if err != nil {
		t.Fatal(err)
	}
	undel, err := Parse(fr("peer-2", "req"), &Options{Lenient: true})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		env  Envelope
		body [][]byte
		want [][]byte
	}{
		{"delimited one", del, fr("meta"), fr("peer-1", "", "meta")},
		{"delimited two", del, fr("meta", "ts"), fr("peer-1", "", "meta", "ts")},
		{"delimited none", del, nil, fr("peer-1", "")},
		{"undelimited one", undel, fr("meta"), fr("peer-2", "meta")},
		{"undelimited two", undel, fr("meta", "ts"), fr("peer-2", "meta", "ts")},
		{"undelimited none gets an empty frame", undel, nil, fr("peer-2", "")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prefix := fr("keep")
			got := tc.env.Reply(prefix, tc.body...)
			if !sameFrames(got[:1], fr("keep")) {
				t.Fatalf("Reply clobbered dst: %q", got)
			}
			if !sameFrames(got[1:], tc.want) {
				t.Fatalf("Reply = %q, want %q", got[1:], tc.want)
			}
			if tc.env.Delimited && got[2] == nil {
				t.Error("delimiter is nil, want a non-nil empty frame")
			}
		})
	}
}

func TestReplyRoundTrip(t *testing.T) {
	inputs := []struct {
		frames [][]byte
		opt    *Options
	}{
		{fr("id", "", "x"), nil},
		{fr("id", "", "a", "", "c"), nil},
		{fr("id", ""), &Options{MinBody: -1}},
		{withShape(62), nil},
		{fr("id", "a"), &Options{Lenient: true}},
		{fr("id", "a", "b", ""), &Options{Lenient: true}},
		{fr("id", "", "b"), &Options{Lenient: true}},
	}
	for _, in := range inputs {
		env, err := Parse(in.frames, in.opt)
		if err != nil {
			t.Fatalf("Parse(%q): %v", in.frames, err)
		}
		if got := env.Reply(nil, env.Body...); !sameFrames(got, in.frames) {
			t.Errorf("Reply(Parse(%q)) = %q", in.frames, got)
		}
	}
}

func TestInvalidOptions(t *testing.T) {
	bad := []Options{
		{MinBody: -2},
		{MaxFrames: -1},
		{MaxFrames: 1},
		{MaxIdentity: -1},
		{MaxBody: -1},
		{MinBody: 3, MaxBody: 2},
		{MaxBody: 1, MinBody: 2},
	}
	for _, o := range bad {
		_, err := Parse(fr("id", "", "x"), &o)
		if !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("Options %+v: err = %v, want ErrInvalidOptions", o, err)
		}
		if decodeguard.IsBadInput(err) {
			t.Errorf("Options %+v: config error %v classified as bad input", o, err)
		}
	}
	if _, err := Parse(fr("id", ""), &Options{MinBody: -1, MaxBody: 1}); err != nil {
		t.Errorf("MinBody -1 with MaxBody 1: %v", err)
	}
}

func TestCheckFrames(t *testing.T) {
	tests := []struct {
		name     string
		frames   [][]byte
		min, max int
		want     string // "" means success
	}{
		{"exactly one", fr("x"), 1, 1, ""},
		{"nil with min 0", nil, 0, 1, ""},
		{"nil with min 1", nil, 1, 1, "too few frames: got 0, want at least 1"},
		{"two for one", fr("a", "b"), 1, 1, "too many frames: got 2, want at most 1"},
		{"range ok", fr("a", "b", "c"), 2, 4, ""},
		{"unbounded max", nFrames(1000, "x"), 1, 0, ""},
		{"range low", fr("a"), 2, 4, "too few frames: got 1, want at least 2"},
		{"range high", nFrames(5, "x"), 2, 4, "too many frames: got 5, want at most 4"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckFrames(tc.frames, tc.min, tc.max)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("CheckFrames: %v", err)
				}
				return
			}
			if decodeguard.ReasonOf(err) != decodeguard.ReasonEnvelope {
				t.Fatalf("reason of %v = %v, want envelope", err, decodeguard.ReasonOf(err))
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
	for _, b := range [][2]int{{-1, 1}, {3, 2}} {
		if err := CheckFrames(fr("a"), b[0], b[1]); !errors.Is(err, ErrInvalidOptions) || decodeguard.IsBadInput(err) {
			t.Errorf("CheckFrames bounds %v: err = %v, want ErrInvalidOptions", b, err)
		}
	}
}

func TestZeroAllocs(t *testing.T) {
	req := fr("peer-identity", "", "payload", "timestamp")
	dealer := fr("peer-identity", "payload")
	lenient := &Options{Lenient: true, MaxBody: 4}
	dst := make([][]byte, 0, 8)
	payload := []byte("reply")
	var env Envelope
	var err error
	cases := []struct {
		name string
		fn   func()
	}{
		{"Parse strict", func() { env, err = Parse(req, nil) }},
		{"Parse lenient", func() { env, err = Parse(dealer, lenient) }},
		{"Reply spread", func() { dst = env.Reply(dst[:0], env.Body...) }},
		{"Reply args", func() { dst = env.Reply(dst[:0], payload, payload) }},
		{"CheckFrames", func() { err = CheckFrames(req, 1, 4) }},
	}
	for _, c := range cases {
		if a := testing.AllocsPerRun(100, c.fn); a != 0 {
			t.Errorf("%s: %v allocs per run, want 0", c.name, a)
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
	}
	// The measurement is live: the error path does allocate (its message).
	if a := testing.AllocsPerRun(100, func() { _, err = Parse(dealer, nil) }); a == 0 || err == nil {
		t.Errorf("error path: %v allocs, err %v; want > 0 allocs and an error", a, err)
	}
}

func BenchmarkParse(b *testing.B) {
	frames := fr("\x00\x6b\x8b\x45\x67", "", "\x93\xc4\x0cget_meta_msg\x00\x01")
	b.ReportAllocs()
	for b.Loop() {
		env, err := Parse(frames, nil)
		if err != nil || len(env.Body) != 1 {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseAndReply(b *testing.B) {
	frames := fr("\x00\x6b\x8b\x45\x67", "", "\x93\xc4\x0cget_meta_msg\x00\x01")
	payload, ts := []byte("payload"), []byte("\xcb\x40\xc8\x1c\xd6\xc8\xb4\x39\x58")
	dst := make([][]byte, 0, 4)
	b.ReportAllocs()
	for b.Loop() {
		env, err := Parse(frames, nil)
		if err != nil {
			b.Fatal(err)
		}
		dst = env.Reply(dst[:0], payload, ts)
	}
}

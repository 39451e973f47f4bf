package envelope

import (
	"errors"
	"testing"

	"github.com/zmqguard/zmqguard/decodeguard"
)

// Fuzz input encoding: the first byte selects Options (see fuzzOptions); the
// rest is a sequence of frames, each a length byte L followed by L bytes (a
// last frame whose L runs past the end takes what is left). An input of only
// the options byte encodes zero frames.
func decodeFuzz(data []byte) (*Options, [][]byte) {
	if len(data) == 0 {
		return nil, nil
	}
	opt := fuzzOptions(data[0])
	data = data[1:]
	var frames [][]byte
	for len(data) > 0 {
		n := min(int(data[0]), len(data)-1)
		frames = append(frames, data[1:1+n])
		data = data[1+n:]
	}
	return opt, frames
}

// encodeFuzz is the inverse of decodeFuzz for frames of at most 255 bytes.
func encodeFuzz(flags byte, frames ...string) []byte {
	out := []byte{flags}
	for _, f := range frames {
		out = append(out, byte(len(f)))
		out = append(out, f...)
	}
	return out
}

// fuzzOptions: bit 0 lenient; bit 1 small limits (MaxFrames 6, MaxIdentity 8,
// MaxBody 3); bit 2 MinBody -1 (else bit 3 MinBody 2).
func fuzzOptions(b byte) *Options {
	if b == 0 {
		return nil
	}
	o := &Options{Lenient: b&1 != 0}
	if b&2 != 0 {
		o.MaxFrames, o.MaxIdentity, o.MaxBody = 6, 8, 3
	}
	switch {
	case b&4 != 0:
		o.MinBody = -1
	case b&8 != 0:
		o.MinBody = 2
	}
	return o
}

// oracle decides independently of Parse whether frames are acceptable and, if
// not, with which reason.
func oracle(frames [][]byte, o *Options) (delimited bool, reason decodeguard.Reason) {
	var lenient bool
	minBody, maxBody, maxFrames, maxID := 1, 0, 64, 255
	if o != nil {
		lenient = o.Lenient
		if o.MinBody == -1 {
			minBody = 0
		} else if o.MinBody > 0 {
			minBody = o.MinBody
		}
		if o.MaxBody > 0 {
			maxBody = o.MaxBody
		}
		if o.MaxFrames > 0 {
			maxFrames = o.MaxFrames
		}
		if o.MaxIdentity > 0 {
			maxID = o.MaxIdentity
		}
	}
	switch {
	case len(frames) == 0:
		return false, decodeguard.ReasonEnvelope
	case len(frames) > maxFrames:
		return false, decodeguard.ReasonOversize
	case len(frames[0]) == 0:
		return false, decodeguard.ReasonEnvelope
	case len(frames[0]) > maxID:
		return false, decodeguard.ReasonOversize
	}
	delimited = len(frames) > 1 && len(frames[1]) == 0
	if !delimited && !lenient {
		return false, decodeguard.ReasonEnvelope
	}
	body := len(frames) - 1
	if delimited {
		body--
	}
	if body < minBody || (maxBody > 0 && body > maxBody) {
		return false, decodeguard.ReasonEnvelope
	}
	return delimited, decodeguard.ReasonNone
}

func FuzzParse(f *testing.F) {
	f.Add([]byte{})
	f.Add(encodeFuzz(0))
	f.Add(encodeFuzz(0, "id", "", "get_meta_msg"))
	f.Add(encodeFuzz(0, "id", "get_meta_msg"))
	f.Add(encodeFuzz(1, "id", "get_meta_msg"))
	f.Add(encodeFuzz(0, "", "", "x"))
	f.Add(encodeFuzz(0, "id"))
	f.Add(encodeFuzz(0, "id", ""))
	f.Add(encodeFuzz(4, "id", ""))
	f.Add(encodeFuzz(5, "id"))
	f.Add(encodeFuzz(2, "identity-too-long", "", "x"))
	f.Add(encodeFuzz(2, "id", "", "a", "b", "c", "d"))
	f.Add(encodeFuzz(3, "id", "a", "b", "c", "d", "e", "f"))
	f.Add(encodeFuzz(8, "id", "", "a"))
	f.Add(encodeFuzz(0, "\x00\x6b\x8b\x45\x67", "", "\x93\xc4\x0cget_meta_msg\x00\x01", "\xcb\x40\xc8\x1c\xd6\xc8\xb4\x39\x58"))
	f.Fuzz(func(t *testing.T, data []byte) {
		opt, frames := decodeFuzz(data)
		env, err := Parse(frames, opt)
		wantDelim, wantReason := oracle(frames, opt)
		if err != nil {
			var de *decodeguard.Error
			if !errors.As(err, &de) {
				t.Fatalf("unclassified error %T: %v", err, err)
			}
			if de.Reason != wantReason {
				t.Fatalf("reason %v, oracle says %v: %v", de.Reason, wantReason, err)
			}
			msg := err.Error()
			for i := 0; i < len(msg); i++ {
				if c := msg[i]; c < 0x20 || c > 0x7e {
					t.Fatalf("error message carries byte %#x: %q", c, msg)
				}
			}
			return
		}
		if wantReason != decodeguard.ReasonNone {
			t.Fatalf("Parse accepted %q, oracle says %v", frames, wantReason)
		}
		l, _ := opt.limits()
		if len(env.Identity) == 0 || len(env.Identity) > l.maxIdentity {
			t.Fatalf("identity length %d outside 1..%d", len(env.Identity), l.maxIdentity)
		}
		if len(env.Body) < l.minBody || (l.maxBody > 0 && len(env.Body) > l.maxBody) ||
			len(env.Body) > l.maxFrames-1 {
			t.Fatalf("body count %d outside bounds %+v", len(env.Body), l)
		}
		if env.Delimited != wantDelim {
			t.Fatalf("Delimited = %v, oracle says %v", env.Delimited, wantDelim)
		}
		reply := env.Reply(nil, env.Body...)
		if env.Delimited || len(env.Body) > 0 {
			if !sameFrames(reply, frames) {
				t.Fatalf("Reply(Parse(%q)) = %q", frames, reply)
			}
		} else if !sameFrames(reply, [][]byte{env.Identity, {}}) {
			t.Fatalf("empty undelimited reply = %q", reply)
		}
	})
}

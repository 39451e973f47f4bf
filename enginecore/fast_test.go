package enginecore

import (
	"encoding/binary"
	"fmt"
	"reflect"
	"testing"
)

// withFastPaths runs f with the fast paths on or off (tests of this package
// do not run in parallel, so the switch is theirs while f runs).
func withFastPaths(on bool, f func()) {
	defer func(was bool) { noFastPaths = was }(noFastPaths)
	noFastPaths = !on
	f()
}

// errText is an error's full text (reason, detail, offset, cause).
func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// sameDecodes decodes frames twice into a Message that prep returns, once
// with the fast paths and once without, and then once more into the same
// Messages (the second decode is where reused capacity lets the fast
// paths run). It fails unless each decode returns the same error text
// and leaves the two Messages the same field by field (left and the used
// aux frames included), after an error as after a success.
func sameDecodes(t *testing.T, frames [][]byte, prep func() *Message) {
	t.Helper()
	slow, fast := prep(), prep()
	for round := range 2 {
		var errSlow, errFast error
		withFastPaths(false, func() { errSlow = Decode(frames, slow, nil) })
		withFastPaths(true, func() { errFast = Decode(frames, fast, nil) })
		if errText(errSlow) != errText(errFast) {
			t.Fatalf("decode %d: general decoders: %v; fast paths: %v", round, errSlow, errFast)
		}
		if reflect.DeepEqual(slow, fast) {
			continue
		}
		// DeepEqual tells a NaN from itself: compare the printed values.
		if s, f := fmt.Sprintf("%+v", *slow), fmt.Sprintf("%+v", *fast); s != f {
			t.Fatalf("decode %d (error %v): the Messages differ:\ngeneral: %s\nfast:    %s", round, errSlow, s, f)
		}
	}
}

var benchCache [][]byte // benchFrames, built once

// benchWarm returns a Message into which the benchmark message was decoded:
// 256 slots with room for token ids and shapes, one in five with logprobs.
func benchWarm(t testing.TB) *Message {
	if benchCache == nil {
		benchCache = benchFrames(t)
	}
	var m Message
	if err := Decode(benchCache, &m, nil); err != nil {
		t.Fatal(err)
	}
	return &m
}

// FuzzFastPaths is the differential test of the fast paths: every input
// decodes to the same Message and the same error with and without them,
// into a fresh Message, one that held a message with every field set, and
// one that held the benchmark message.
func FuzzFastPaths(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(joinFrames(s))
	}
	f.Add(joinFrames(benchFrames(f)))
	f.Fuzz(func(t *testing.T, in []byte) {
		frames := splitFrames(in)
		sameDecodes(t, frames, func() *Message { return new(Message) })
		sameDecodes(t, frames, func() *Message { return reusedAfterFull(t) })
		sameDecodes(t, frames, func() *Message { return benchWarm(t) })
	})
}

// TestFastPathsSame runs the differential check over hand-made variants of
// the forms the fast paths accept, each a byte away from one they refuse.
func TestFastPathsSame(t *testing.T) {
	bench := benchFrames(t)
	body := bench[0]
	// Every single-byte change of the body's first 160 bytes (the first
	// output, with logprobs, and the next, without) to a few values the
	// fast paths test for.
	for i := range min(160, len(body)) {
		for _, v := range []byte{0x00, 0x01, 0x7f, 0x90, 0x93, 0x9e, 0xa3, 0xc0, 0xc7, 0xcc, 0xcd, 0xff} {
			if body[i] == v {
				continue
			}
			frames := append([][]byte(nil), bench...)
			frames[0] = append([]byte(nil), body...)
			frames[0][i] = v
			sameDecodes(t, frames, func() *Message { return benchWarm(t) })
		}
	}
	// An aux frame one byte short and one byte long.
	for _, d := range []int{-1, 1} {
		frames := append([][]byte(nil), bench...)
		frames[1] = make([]byte, len(bench[1])+d)
		sameDecodes(t, frames, func() *Message { return benchWarm(t) })
	}
	// A budget that runs out inside the outputs.
	for _, max := range []int{100, 600, 1200} {
		var slow, fast Message
		lim := &Limits{}
		lim.Scan.MaxElements = max
		var errSlow, errFast error
		withFastPaths(false, func() {
			_ = Decode(bench, &slow, nil)
			errSlow = Decode(bench, &slow, lim)
		})
		withFastPaths(true, func() {
			_ = Decode(bench, &fast, nil)
			errFast = Decode(bench, &fast, lim)
		})
		if errSlow == nil || errText(errSlow) != errText(errFast) {
			t.Fatalf("MaxElements %d: general decoders: %v; fast paths: %v", max, errSlow, errFast)
		}
	}
}

// TestFastPathsTaken checks that the benchmark message's outputs and
// arrays, decoded into a warm Message, take the fast paths (the forms vLLM
// sends), and that forms outside them do not.
func TestFastPathsTaken(t *testing.T) {
	m := benchWarm(t)
	frames := benchFrames(t)
	clear(m.used)
	d := decoder{m: m, frames: frames, budget: 1 << 20, firstInvalid: -1}
	b := frames[0]
	// The body: [engine_index, [outputs...], ...]; skip to the first output.
	if b[0]&0xf0 != 0x90 || b[1] != 0x01 || b[2] != 0xdc {
		t.Fatalf("unexpected body start %x", b[:4])
	}
	b = b[5:]
	plain, prefix := 0, 0
	for j := range 256 {
		p, n, k, state := d.outputFast(b, &m.Outputs[j])
		switch state {
		case fastWhole:
			plain++
			b = b[p:]
		case fastPrefix:
			prefix++
			var err error
			if b, err = d.outputRest(b, b, &m.Outputs[j], p, n, k); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("output %d: not taken", j)
		}
	}
	if plain != 204 || prefix != 52 {
		t.Fatalf("%d whole, %d prefix; want 204 and 52", plain, prefix)
	}
	for i, w := range m.used {
		if want := ^uint64(0); i == len(m.used)-1 {
			want = 1<<(len(frames)%64) - 1
			if w|1 != want {
				t.Fatalf("aux frames used: word %d is %x, want %x", i, w, want)
			}
		} else if w|1 != want {
			t.Fatalf("aux frames used: word %d is %x", i, w)
		}
	}
	// Forms the fast array path leaves to array.
	aux := make([]byte, 24)
	for _, c := range []struct {
		name string
		wire []byte
		ok   bool
	}{
		{"int32 [1, 6] in ext 8", append([]byte{0x93, 0xa3, '<', 'i', '4', 0x92, 1, 6, 0xc7, 24, 3}, aux...), true},
		{"int64 [1] in fixext 8", []byte{0x93, 0xa3, '<', 'i', '8', 0x91, 1, 0xd7, 3, 0, 0, 0, 0, 0, 0, 0, 0}, true},
		{"torch dtype name", append([]byte{0x93, 0xa5, 'i', 'n', 't', '3', '2', 0x92, 1, 6, 0xc7, 24, 3}, aux...), false},
		{"empty array", []byte{0x93, 0xa3, '<', 'i', '4', 0x92, 0, 6, 0xc7, 0, 3, 0, 0, 0}, false},
		{"ext type 1", append([]byte{0x93, 0xa3, '<', 'i', '4', 0x92, 1, 6, 0xc7, 24, 1}, aux...), false},
		{"dimension over 127", append([]byte{0x93, 0xa3, '<', 'u', '1', 0x91, 0xcc, 200, 0xc7, 200, 3}, make([]byte, 200)...), false},
		{"wrong data length", append([]byte{0x93, 0xa3, '<', 'i', '4', 0x92, 1, 5, 0xc7, 24, 3}, aux...), false},
	} {
		a := Array{Shape: make([]int, 0, 4)}
		d.budget = 100
		_, ok := d.arrayFast(c.wire, &a)
		if ok != c.ok {
			t.Errorf("%s: arrayFast took it: %v, want %v", c.name, ok, c.ok)
		}
		if !ok && (d.budget != 100 || a.DType != dtNone) {
			t.Errorf("%s: refused, but changed the state", c.name)
		}
	}
	// An output with a token id over 32 bits, and one whose id is not ASCII.
	tok := binary.BigEndian.AppendUint64([]byte{0x9e, 0xa1, 'x', 0x91, 0xcf}, 1<<40)
	tok = append(tok, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0x00)
	o := Output{NewTokenIDs: make([]int64, 0, 4)}
	if _, _, _, state := d.outputFast(tok, &o); state != fastNo {
		t.Errorf("uint64 token id: state %d, want fastNo", state)
	}
	if _, _, _, state := d.outputFast([]byte{0x9e, 0xa1, 0xe9, 0x91, 0x01, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0x00}, &o); state != fastNo {
		t.Errorf("non-ASCII request id: state %d, want fastNo", state)
	}
}

package zmtpguard

import (
	"bufio"
	"testing"
)

// TestReadBufferedSizesOnce: a wholly buffered 157-frame message read into
// a cold Message allocates its three buffers once each (body, offsets,
// frames), not once per growth step, and a warm Message not at all; the
// frames read are the frames sent.
func TestReadBufferedSizesOnce(t *testing.T) {
	var s []byte
	var want [][]byte
	for i := range 157 {
		body := make([]byte, 24+i%7)
		for k := range body {
			body[k] = byte(i + k)
		}
		want = append(want, body)
		s = append(s, dataFrame(i < 156, body)...)
	}
	nc := &loopConn{b: s}
	c := &Conn{nc: nc, br: bufio.NewReaderSize(nc, defaultReadBufferSize), cfg: Config{MaxFrames: 1024}.withDefaults(), local: "PULL"}
	var warm Message
	if err := c.ReadMessage(&warm); err != nil { // fills the read buffer
		t.Fatal(err)
	}
	cold := testing.AllocsPerRun(20, func() {
		var m Message
		if err := c.ReadMessage(&m); err != nil {
			t.Fatal(err)
		}
		if len(m.Frames) != len(want) {
			t.Fatalf("%d frames, want %d", len(m.Frames), len(want))
		}
		for i, f := range m.Frames {
			if string(f) != string(want[i]) {
				t.Fatalf("frame %d differs", i)
			}
		}
	})
	// Three buffers, plus at most one more on the rounds whose message
	// straddles the end of the read buffer (the general path then reads it).
	if raceEnabled {
		t.Logf("race detector on: allocation counts (%.1f cold) not checked", cold)
		return
	}
	if cold > 4 {
		t.Errorf("cold Message: %.1f allocations per 157-frame message, want at most 4", cold)
	}
	hot := testing.AllocsPerRun(20, func() {
		if err := c.ReadMessage(&warm); err != nil {
			t.Fatal(err)
		}
	})
	if hot != 0 {
		t.Errorf("warm Message: %.1f allocations per message, want 0", hot)
	}
}

// BenchmarkReadMessage157Cold reads a 157-frame message (the outputs
// receiver's shape) into a fresh Message each time: allocs/op is what a
// cold receive slot costs.
func BenchmarkReadMessage157Cold(b *testing.B) {
	var s []byte
	for i := range 157 {
		s = append(s, dataFrame(i < 156, make([]byte, 24))...)
	}
	nc := &loopConn{b: s}
	c := &Conn{nc: nc, br: bufio.NewReaderSize(nc, defaultReadBufferSize), cfg: Config{MaxFrames: 1024}.withDefaults(), local: "PULL"}
	b.ReportAllocs()
	for b.Loop() {
		var m Message
		if err := c.ReadMessage(&m); err != nil {
			b.Fatal(err)
		}
	}
}

// TestParsersDoNotAllocate: the wire parsers zmtpguard reads through
// (internal/stack/zmtpwire, behind the wrappers that turn their refusals into
// Violations) allocate nothing on valid input: the general read path and
// CURVE parse every frame header through them.
func TestParsersDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("race detector on: allocation counts are not checked")
	}
	short, long := []byte{0x01, 100}, longHeader(0, 70000)
	g := greetingWith(3, 1, "NULL")
	cmd := append([]byte{4}, "PING\x00\x01x"...)
	allocs := testing.AllocsPerRun(100, func() {
		if _, ok, err := parseFrameHeader(short, 1<<20); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if _, ok, err := parseFrameHeader(long, 1<<20); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if err := checkGreeting(g[:], nil); err != nil {
			t.Fatal(err)
		}
		if _, _, err := parseCommand(cmd); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per round of valid headers, greeting and command, want 0", allocs)
	}
}

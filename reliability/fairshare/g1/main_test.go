package main

import (
	"bytes"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestFrames: the hand-built frames are ZMTP's (short and long headers,
// a command's name length byte).
func TestFrames(t *testing.T) {
	if got := command("PING", []byte{0, 0}); !bytes.Equal(got, []byte("\x04\x07\x04PING\x00\x00")) {
		t.Errorf("PING frame %q", got)
	}
	long := frame(0, make([]byte, 300))
	if len(long) != 309 || long[0] != 0x02 || long[7] != 1 || long[8] != 44 {
		t.Errorf("long header %x", long[:9])
	}
	if g := greeting("NULL"); len(g) != 64 || g[0] != 0xff || g[9] != 0x7f || string(g[12:16]) != "NULL" {
		t.Errorf("greeting %x", g)
	}
}

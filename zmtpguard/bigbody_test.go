package zmtpguard

import (
	"bytes"
	"testing"
	"time"
)

// TestBigBodyExactBuffer (issue 37): a frame body over bigBody, arriving in
// pieces, is read whole into a buffer of its exact size, after a small
// frame of the same message. Grown by append as it arrived, the 6 MiB body
// left a 7.3 MB buffer (and a 7.5 MB body allocated 40.3 MB on the way).
func TestBigBodyExactBuffer(t *testing.T) {
	cfg := &Config{MaxMessageSize: 16 << 20, BodyTimeout: 10 * time.Second}
	nc, c := rawPeer(t, cfg)
	big := make([]byte, 6<<20+123)
	for i := range big {
		big[i] = byte(i * 7)
	}
	msg := append(dataFrame(true, []byte("head")), dataFrame(false, big)...)
	for round := range 2 {
		var m Message
		ch := readResult(c, &m)
		for i := 0; i < len(msg); i += len(msg) / 3 {
			if _, err := nc.Write(msg[i:min(len(msg), i+len(msg)/3)]); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("round %d: message not read", round)
		}
		if len(m.Frames) != 2 || string(m.Frames[0]) != "head" || !bytes.Equal(m.Frames[1], big) {
			t.Fatalf("round %d: %d frames, not the message sent", round, len(m.Frames))
		}
		if n := len(big) + 4; cap(m.buf) > n+64<<10 {
			t.Errorf("round %d: a %d-byte message in a %d-byte buffer, want its size", round, n, cap(m.buf))
		}
	}
}

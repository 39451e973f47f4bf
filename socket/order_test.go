package socket

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/zmtpguard"
)

// Messages of one peer keep their order through background hand-offs
// (inbox full) and merges.
func TestOrderThroughBackgroundHandOff(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	pull := mustSocket(t, NewPull)
	ep := mustBind(t, pull)
	c, err := zmtpguard.Dial(ctx, "tcp", strings.TrimPrefix(ep, "tcp://"), "PUSH", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 20000
	go func() {
		var b [8]byte
		for i := range n {
			binary.BigEndian.PutUint64(b[:], uint64(i))
			c.WriteMessage(b[:])
			if i%3 == 0 {
				c.Flush()
			}
		}
		c.Flush()
	}()
	for i := range n {
		m, err := pull.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := binary.BigEndian.Uint64(m.Frames[0]); got != uint64(i) {
			t.Fatalf("message %d: got %d", i, got)
		}
		if i%500 == 0 {
			time.Sleep(2 * time.Millisecond)
		}
	}
}

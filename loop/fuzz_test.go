package loop

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/zmqguard/zmqguard/envelope"
	"github.com/zmqguard/zmqguard/internal/stack/msgpscan"
	"github.com/zmqguard/zmqguard/internal/testkit/vllmwire"
)

// FuzzLoop feeds arbitrary bytes to a typed PULL loop and, split into
// frames at 0x00 bytes, to a lenient ROUTER loop; each time a valid message
// follows. Nothing may panic or end Run, the counters must add up, and the
// valid message must be the last one delivered.
func FuzzLoop(f *testing.F) {
	for _, sd := range typedSeeds {
		f.Add(sd.frame)
	}
	f.Add(statsFrame)
	f.Add([]byte("id\x00\x00\x93\xc4\x0cget_meta_msg\x00\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx := context.Background()
		var last *vllmwire.Message
		l := newStatsLoop(t, &sliceRecv{msgs: [][][]byte{{data}, {statsFrame}}},
			func(_ context.Context, d Delivery[vllmwire.Message]) error {
				last = d.Value
				return nil
			}, nil)
		if err := l.Run(ctx); !errors.Is(err, errReceiverClosed) {
			t.Fatalf("typed Run = %v", err)
		}
		st := l.Stats()
		if st.Received != 2 || st.Delivered+st.Dropped.Total() != 2 || last == nil {
			t.Fatalf("typed stats %+v", st)
		}
		checkStats(t, last)

		parts := bytes.Split(data, []byte{0})
		var n int
		rl, err := New(&sliceRecv{msgs: [][][]byte{parts, {[]byte("id"), {}, {0x90}}}}, Config[any]{
			Logger:   discard(),
			Envelope: &envelope.Options{Lenient: true},
			Decode: func(body [][]byte, dst *any) error {
				v, err := msgpscan.DecodeUntyped(body[len(body)-1], nil) // Envelope ensures a body
				*dst = v
				return err
			},
			Handler: func(_ context.Context, d Delivery[any]) error {
				n++
				return nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := rl.Run(ctx); !errors.Is(err, errReceiverClosed) {
			t.Fatalf("router Run = %v", err)
		}
		if st := rl.Stats(); st.Received != 2 || st.Delivered+st.Dropped.Total() != 2 || n < 1 {
			t.Fatalf("router stats %+v", st)
		}
	})
}

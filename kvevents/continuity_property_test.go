package kvevents

import (
	"context"
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// TestContinuityProperty: whatever a publisher does (send, skip batches,
// drop the connection, restart as a new process at any seq), a consumer
// that clears a source on UpdateReset and stops trusting it on UpdateLost
// never holds the batches of two runs as certain at once, and every batch
// received is delivered exactly once. Without the proof of continuity a
// restart whose first seq is above the old run's last one mixed the runs.
func TestContinuityProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var certain map[int]bool // runs whose batches are certain
		type sentBatch struct {
			run int
			seq uint64
		}
		var delivered, sent []sentBatch
		handler := func(_ context.Context, u Update) error {
			switch u.Kind {
			case UpdateReset, UpdateLost:
				certain = map[int]bool{}
			case UpdateBatch:
				run := int(u.Batch.TS) / 1_000_000
				if certain == nil {
					certain = map[int]bool{}
				}
				certain[run] = true
				if len(certain) > 1 {
					return fmt.Errorf("runs %v certain at once (batch %d of run %d)", certain, u.Seq, run)
				}
				delivered = append(delivered, sentBatch{run, u.Seq})
			}
			return nil
		}
		sub, err := NewSubscriber(Config{Handler: handler, Logger: quiet})
		if err != nil {
			rt.Fatal(err)
		}
		defer sub.Close()
		so, err := newSource(sub, Source{Name: "s", Live: "tcp://127.0.0.1:1"})
		if err != nil {
			rt.Fatal(err)
		}
		defer so.stop()
		so.ctx, so.cancel = context.WithCancel(context.Background())
		run, conn := 0, uint64(1)
		cur := rapid.Uint64Range(0, 5).Draw(rt, "start")
		for _, op := range rapid.SliceOfN(rapid.IntRange(0, 9), 1, 60).Draw(rt, "ops") {
			switch {
			case op < 6: // send
				p := AppendBatch(nil, float64(run*1_000_000+int(cur)), []Event{storedEvent(cur)}, Some[int64](0), true)
				if err := so.onLive(context.Background(), cur, p, conn); err != nil {
					rt.Fatal(err)
				}
				sent = append(sent, sentBatch{run, cur})
				cur++
			case op < 7: // the subscriber misses some
				cur += rapid.Uint64Range(1, 3).Draw(rt, "skip")
			case op < 8: // the connection drops and comes back
				conn++
			default: // a new process, which may have published any number of batches
				run++
				conn++
				switch rapid.IntRange(0, 2).Draw(rt, "restart") {
				case 0: // exactly where the old run was: nothing looks missing
				case 1: // a little past it
					cur += rapid.Uint64Range(1, 3).Draw(rt, "past")
				default:
					cur = rapid.Uint64Range(0, 30).Draw(rt, "restart at")
				}
			}
		}
		if fmt.Sprint(delivered) != fmt.Sprint(sent) {
			rt.Fatalf("delivered %v, sent %v", delivered, sent)
		}
	})
}

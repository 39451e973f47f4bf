package kvevents

import (
	"context"
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// TestOrderingProperty: whatever a publisher does (send, skip batches,
// restart), the updates of a source without a replay endpoint cover each
// run's sequence numbers exactly once, in order: every batch received is
// delivered once, every skipped one is in exactly one lost range, and each
// restart is one reset.
func TestOrderingProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		fromStart := rapid.Bool().Draw(rt, "fromStart")
		rec := newRecorder()
		sub, err := NewSubscriber(Config{Handler: rec.handle, Logger: quiet, FromStart: fromStart})
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
		var sent []uint64
		cur := rapid.Uint64Range(0, 5).Draw(rt, "start")
		restarts := 0
		for _, op := range rapid.SliceOfN(rapid.IntRange(0, 9), 1, 60).Draw(rt, "ops") {
			switch {
			case op < 6: // send
				if err := so.onLive(context.Background(), cur, payloadOf(cur), 1); err != nil {
					rt.Fatal(err)
				}
				sent = append(sent, cur)
				cur++
			case op < 9: // the subscriber misses some
				cur += uint64(op - 5)
			default: // restart (only a restart if it goes back)
				if len(sent) > 0 && cur > 0 {
					restarts++
				}
				cur = 0
			}
		}
		// Replay the updates through a model of one run at a time.
		lines := rec.snapshot()
		var next uint64
		started := false
		resets := 0
		var delivered []uint64
		for _, l := range lines {
			var seq, from, to uint64
			var name string
			switch {
			case sscan(l, "s batch %d", &seq):
				if started && seq != next {
					rt.Fatalf("batch %d, expected %d: %q", seq, next, lines)
				}
				started, next = true, seq+1
				delivered = append(delivered, seq)
			case sscan(l, "s lost %d %d", &from, &to):
				if from >= to || started && from != next || !started && !(fromStart && from == 0) && resets == 0 {
					rt.Fatalf("lost %d %d at %d: %q", from, to, next, lines)
				}
				started, next = true, to
			case sscan(l, "s reset %d", &seq):
				resets++
				started, next = fromStart, 0
				if !fromStart {
					// After a reset the run restarts at 0: a lost range
					// from 0 or the batch 0 follows.
					started = true
				}
			default:
				rt.Fatalf("unexpected update %q (%s)", l, name)
			}
		}
		if fmt.Sprint(delivered) != fmt.Sprint(sent) {
			rt.Fatalf("delivered %v, sent %v", delivered, sent)
		}
		if resets > restarts {
			rt.Fatalf("%d resets for %d restarts", resets, restarts)
		}
	})
}

func sscan(s, format string, args ...any) bool {
	n, err := fmt.Sscanf(s, format, args...)
	return err == nil && n == len(args)
}

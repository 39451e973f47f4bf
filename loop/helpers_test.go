package loop

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"go.uber.org/goleak"

	"github.com/zmqguard/zmqguard/socket"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// item is one thing a chanRecv returns.
type item struct {
	frames [][]byte
	err    error
}

// errReceiverClosed is what the tests' own receivers return once closed,
// as a closed socket does: it matches net.ErrClosed.
var errReceiverClosed = fmt.Errorf("loop: receiver closed: %w", net.ErrClosed)

// chanRecv is a Receiver fed from a channel; a closed channel reads as a
// closed receiver.
type chanRecv struct{ ch chan item }

func newChanRecv(n int) *chanRecv { return &chanRecv{ch: make(chan item, n)} }

func (c *chanRecv) Recv(ctx context.Context) (socket.Msg, error) {
	select {
	case it, ok := <-c.ch:
		if !ok {
			return socket.Msg{}, errReceiverClosed
		}
		return socket.Msg{Frames: it.frames}, it.err
	case <-ctx.Done():
		return socket.Msg{}, ctx.Err()
	}
}

func (c *chanRecv) send(frames ...[]byte) { c.ch <- item{frames: frames} }

// sliceRecv returns the messages of a slice in order, then reports closed.
// It allocates nothing per Recv.
type sliceRecv struct {
	msgs [][][]byte
	i    int
}

func (s *sliceRecv) Recv(ctx context.Context) (socket.Msg, error) {
	if err := ctx.Err(); err != nil {
		return socket.Msg{}, err
	}
	if s.i >= len(s.msgs) {
		return socket.Msg{}, errReceiverClosed
	}
	s.i++
	return socket.Msg{Frames: s.msgs[s.i-1]}, nil
}

// repeatRecv returns the same message forever (for benchmarks).
type repeatRecv struct{ msg socket.Msg }

func (r *repeatRecv) Recv(context.Context) (socket.Msg, error) { return r.msg, nil }

// fakeClock advances by step on every reading.
type fakeClock struct {
	mu   sync.Mutex
	t    time.Time
	step time.Duration
}

func newFakeClock(step time.Duration) *fakeClock {
	return &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), step: step}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.t
	c.t = c.t.Add(c.step)
	return t
}

// logRecord is what countHandler keeps of one record.
type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
	count uint64
}

// countHandler is a slog.Handler that records every record.
type countHandler struct {
	mu   sync.Mutex
	recs []logRecord
}

func (h *countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *countHandler) WithGroup(string) slog.Handler            { return h }
func (h *countHandler) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		if a.Key == "count" {
			rec.count = a.Value.Uint64()
		}
		return true
	})
	h.mu.Lock()
	h.recs = append(h.recs, rec)
	h.mu.Unlock()
	return nil
}

func (h *countHandler) records() []logRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]logRecord(nil), h.recs...)
}

// checkSafe fails t if any attribute of any record holds a byte outside
// printable ASCII (other than the "…" cut mark and the stack's newlines and
// tabs).
func checkSafe(t *testing.T, recs []logRecord) {
	t.Helper()
	for _, r := range recs {
		for k, v := range r.attrs {
			if k == "stack" {
				v = strings.NewReplacer("\n", "", "\t", "").Replace(v)
			}
			v = strings.ReplaceAll(v, "…", "")
			v = strings.ReplaceAll(v, "µ", "") // durations
			for i := 0; i < len(v); i++ {
				if c := v[i]; c < 0x20 || c > 0x7e {
					t.Fatalf("log attr %s=%q holds raw byte %#x", k, v, c)
				}
			}
		}
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// testCtx bounds a test's time: generous, because the flood tests push
// 100,000 frames through a race-instrumented loop on a possibly loaded machine.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// zmq4Pair returns a zmq4 PULL listening on 127.0.0.1 and a PUSH dialled to
// it.
func zmq4Pair(t *testing.T, ctx context.Context) (pull, push zmq4.Socket) {
	t.Helper()
	pull = zmq4.NewPull(ctx)
	if err := pull.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	push = zmq4.NewPush(ctx)
	if err := push.Dial("tcp://" + pull.Addr().String()); err != nil {
		pull.Close()
		t.Fatal(err)
	}
	return pull, push
}

// deliveryBody returns the frames the decoder saw: Envelope.Body when
// Config.Envelope is set, else Msg.Frames.
func deliveryBody[T any](d Delivery[T]) [][]byte {
	if d.Envelope != nil {
		return d.Envelope.Body
	}
	return d.Msg.Frames
}

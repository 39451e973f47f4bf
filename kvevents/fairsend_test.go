package kvevents

import (
	"context"
	"encoding/binary"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/vllm"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// rawReplayClient handshakes a DEALER with ep that reads nothing unless the
// test reads it. It answers no PING:
// the publishers it talks to have heartbeats off, so that only the write
// deadline can remove it.
func rawReplayClient(t *testing.T, ctx context.Context, ep string) *zmtpguard.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", strings.TrimPrefix(ep, "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := zmtpguard.Handshake(ctx, nc, "DEALER", nil, nil)
	if err != nil {
		nc.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func requestReplay(t *testing.T, c *zmtpguard.Conn, start uint64) {
	t.Helper()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], start)
	if err := c.WriteMessage(nil, b[:]); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
}

// readReplay reads one replay's replies from c (topic-frame form) until a
// marker, each read bounded by 10 s; it returns the batches' sequence
// numbers and the marker's.
func readReplay(t *testing.T, c *zmtpguard.Conn) (seqs []uint64, marker uint64) {
	t.Helper()
	var m zmtpguard.Message
	for {
		c.NetConn().SetReadDeadline(time.Now().Add(10 * time.Second))
		if err := c.ReadMessage(&m); err != nil {
			t.Fatalf("after %d replies, no marker: %v", len(seqs), err)
		}
		if m.Command != "" {
			continue
		}
		if len(m.Frames) != 4 || len(m.Frames[2]) != 8 {
			t.Fatalf("reply of %d frames", len(m.Frames))
		}
		seq := binary.BigEndian.Uint64(m.Frames[2])
		if seq >= replayErrorSeq {
			if len(m.Frames[3]) != 0 {
				t.Fatalf("marker %x with a payload", seq)
			}
			return seqs, seq
		}
		seqs = append(seqs, seq)
	}
}

// Issue 29 row 3: replay clients that never read must not starve an honest
// one. Twenty clients ask for the whole buffer and never read; the honest
// client, asking after them, must get every batch, in order, and the end
// marker. Before, the first clients' queues took the whole send budget and
// the honest client got the end marker after 0 batches (its replies were
// dropped: first-come budget, and the replay never waited).
func TestReplayStalledClientsDoNotStarveHonest(t *testing.T) {
	const steps = 3000
	pub, err := NewPublisher(PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Bind: true, ReplayEndpoint: "tcp://127.0.0.1:0",
		BufferSteps: steps, Logger: quiet, ReplaysPerHost: -1, // every client is on 127.0.0.1
		Socket: socket.Options{SendTotalBytes: 4 << 20, HeartbeatInterval: -1, Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	p, _ := realisticBatch(1)
	for range steps {
		if err := pub.PublishRaw(p); err != nil {
			t.Fatal(err)
		}
	}
	poll.WaitFor(t, waitTimeout, "all published", func() bool { return pub.Stats().Published == steps })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const stalled = 20
	for range stalled {
		requestReplay(t, rawReplayClient(t, ctx, pub.ReplayEndpoint()), 0)
	}
	poll.WaitFor(t, waitTimeout, "the stalled clients' replays", func() bool { return pub.Stats().Replays == stalled })
	honest := rawReplayClient(t, ctx, pub.ReplayEndpoint())
	requestReplay(t, honest, 0)
	seqs, marker := readReplay(t, honest)
	if marker != replayEndSeq || len(seqs) != steps {
		t.Fatalf("honest client got %d of %d batches and marker %x (publisher %+v)", len(seqs), steps, marker, pub.Stats())
	}
	for i, s := range seqs {
		if s != uint64(i) {
			t.Fatalf("reply %d has seq %d", i, s)
		}
	}
}

// Issue 29 row 3 (no silent loss): a replay that cannot deliver every batch
// it started with must not end with the normal end marker. The client stalls
// until the batches it still needs have left the buffer; when it reads, it
// must find the replies contiguous from its start and then the error
// marker, never the end marker after a hole. Before, the replay dropped the
// replies its full queue could not take and still sent the end marker.
func TestReplayIncompleteEndsWithErrorMarker(t *testing.T) {
	const steps = 200
	pub, err := NewPublisher(PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Bind: true, ReplayEndpoint: "tcp://127.0.0.1:0",
		BufferSteps: steps, Logger: quiet,
		Socket: socket.Options{SendQueueBytes: 64 << 10, HeartbeatInterval: -1, Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	big := make([]byte, 60<<10)
	for range steps {
		if err := pub.PublishRaw(big); err != nil {
			t.Fatal(err)
		}
	}
	poll.WaitFor(t, waitTimeout, "the large batches published", func() bool { return pub.Stats().Published == steps })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := rawReplayClient(t, ctx, pub.ReplayEndpoint())
	requestReplay(t, c, 0)
	poll.WaitFor(t, waitTimeout, "the replay under way", func() bool { return pub.Stats().ReplayedBatches > 0 })
	// The buffer moves on: every batch the replay has not sent yet leaves
	// it.
	for range steps {
		if err := pub.PublishRaw([]byte{0x90}); err != nil {
			t.Fatal(err)
		}
	}
	poll.WaitFor(t, waitTimeout, "the buffer replaced", func() bool { return pub.Stats().Published == 2*steps })
	seqs, marker := readReplay(t, c)
	for i, s := range seqs {
		if s != uint64(i) {
			t.Fatalf("reply %d has seq %d: a hole in the replay (marker %x)", i, s, marker)
		}
	}
	switch {
	case marker == replayEndSeq && len(seqs) != steps:
		t.Fatalf("end marker after %d of %d batches: silent loss (publisher %+v)", len(seqs), steps, pub.Stats())
	case marker == replayErrorSeq:
		if st := pub.Stats(); st.ReplaysIncomplete != 1 {
			t.Fatalf("error marker not counted: %+v", st)
		}
	}
	t.Logf("client got %d of %d batches, then marker %x", len(seqs), steps, marker)
}

// Issue 29 row 12: a replay-request flood from one connection is served at
// most once per ReplayInterval; the requests refused are answered with the
// error marker, and past ReplayFloodLimit refusals in a row the connection
// is closed. Another connection's replay is served in full meanwhile.
// Before, every request was a whole replay.
func TestReplayRequestFloodRateLimited(t *testing.T) {
	pub := newTestPublisher(t, vllm.Latest(), true)
	for i := range 10 {
		pub.PublishRaw(payloadOf(uint64(i)))
	}
	poll.WaitFor(t, waitTimeout, "published", func() bool { return pub.Stats().Published == 10 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	flood := rawReplayClient(t, ctx, pub.ReplayEndpoint())
	start := time.Now()
	const n = 300
	var req [8]byte
	for range n {
		if flood.WriteMessage(nil, req[:]) != nil {
			break // closed by the publisher already
		}
	}
	flood.Flush()
	honest := rawReplayClient(t, ctx, pub.ReplayEndpoint())
	requestReplay(t, honest, 0)
	seqs, marker := readReplay(t, honest)
	if marker != replayEndSeq || len(seqs) != 10 {
		t.Fatalf("honest replay during the flood: %d batches, marker %x", len(seqs), marker)
	}
	poll.WaitFor(t, waitTimeout, "the flooding connection closed", func() bool { return pub.Stats().ReplayFloods == 1 })
	st := pub.Stats()
	// One replay per interval at most, plus the honest one and the first.
	limit := uint64(time.Since(start)/defaultReplayInterval) + 2
	if st.Replays > limit {
		t.Fatalf("%d replays served to a flood of %d in %v (limit %d): %+v", st.Replays, n, time.Since(start), limit, st)
	}
	if st.ReplaysRefused < defaultReplayFloodLimit {
		t.Fatalf("%d requests refused, want at least %d: %+v", st.ReplaysRefused, defaultReplayFloodLimit, st)
	}
	// The flooder got its replay, error markers, then its connection
	// closed.
	var m zmtpguard.Message
	for {
		flood.NetConn().SetReadDeadline(time.Now().Add(10 * time.Second))
		if err := flood.ReadMessage(&m); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("flooding connection still open")
			}
			break
		}
	}
}

// Issue 29 row 12: reconnecting for a fresh connection's first replay, or
// asking from many connections, is bounded per host by ReplaysPerHost.
func TestReplaysPerHost(t *testing.T) {
	pub, err := NewPublisher(PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Bind: true, ReplayEndpoint: "tcp://127.0.0.1:0",
		Logger: quiet, ReplaysPerHost: 5, Socket: socket.Options{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	pub.PublishRaw(payloadOf(0))
	poll.WaitFor(t, waitTimeout, "published", func() bool { return pub.Stats().Published == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	const conns = 40
	markers := map[uint64]int{}
	for range conns {
		c := rawReplayClient(t, ctx, pub.ReplayEndpoint())
		requestReplay(t, c, 0)
		_, m := readReplay(t, c)
		markers[m]++
		c.Close()
	}
	// A bucket of 5, refilled at 5 a second.
	limit := 5 + int(time.Since(start).Seconds()*5) + 1
	if markers[replayEndSeq] > limit || markers[replayErrorSeq] == 0 {
		t.Fatalf("%d connections from one host in %v: %d replays, %d refused (limit %d)", conns, time.Since(start),
			markers[replayEndSeq], markers[replayErrorSeq], limit)
	}
}

// Issue 29 row 2/3: both publisher sockets have a write deadline by default.
func TestPublisherDefaultWriteDeadlines(t *testing.T) {
	pub := newTestPublisher(t, vllm.Latest(), true)
	if got := pub.pub.Options().WriteTimeout; got != 10*time.Second { // an XPUB's default (socket.Options.WriteTimeout)
		t.Errorf("live XPUB WriteTimeout %v, want %v", got, 10*time.Second)
	}
	if got := pub.rep.Options().WriteTimeout; got != defaultReplayWriteTimeout {
		t.Errorf("replay ROUTER WriteTimeout %v, want %v", got, defaultReplayWriteTimeout)
	}
	off, err := NewPublisher(PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Bind: true, ReplayEndpoint: "tcp://127.0.0.1:0",
		Logger: quiet, Socket: socket.Options{WriteTimeout: -1}})
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	if got := off.rep.Options().WriteTimeout; got >= 0 {
		t.Errorf("WriteTimeout -1 gave the replay ROUTER %v", got)
	}
}

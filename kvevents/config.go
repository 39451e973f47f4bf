package kvevents

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/vllm"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// Defaults for Config.
const (
	// DefaultReplayTimeout is how long a replay may stay silent (no reply
	// message at all) before it is given up.
	DefaultReplayTimeout = 10 * time.Second
	// DefaultReplayDeadline bounds a whole replay, however chatty the
	// replay server is.
	DefaultReplayDeadline = 60 * time.Second
	// DefaultMaxReplays caps the replays running at once across all sources.
	DefaultMaxReplays = 16
	// DefaultReplaySlice is how long a replay keeps its slot while another
	// source waits for one (see Config.ReplaySlice).
	DefaultReplaySlice = time.Second
	// DefaultReplayAttempts is how many replays in a row may fail to make
	// progress on a hole before it is reported lost (Config.ReplayAttempts).
	DefaultReplayAttempts = 3
	// DefaultMemoryBudget bounds, across all sources, the bytes a
	// Subscriber holds (Config.MemoryBudget).
	DefaultMemoryBudget = 128 << 20
	// DefaultReplayBackoff is the first pause before a source's next replay
	// after one failed; it doubles per failure up to DefaultReplayBackoffMax.
	DefaultReplayBackoff    = 500 * time.Millisecond
	DefaultReplayBackoffMax = 30 * time.Second
	// DefaultMaxBuffered bounds the live batches one source buffers while
	// its replay runs; DefaultMaxBufferedBytes bounds their payload bytes.
	DefaultMaxBuffered      = 4096
	DefaultMaxBufferedBytes = 64 << 20 // one batch of DefaultMaxPayload
	// MaxLostRanges is how many recent lost ranges SourceStats keeps.
	MaxLostRanges = 16
	// endSeq is the replay end marker's sequence number (-1 as 8 bytes),
	// ReplayEndSeq; ReplayErrorSeq (publisher.go) is the error marker's.
	endSeq = ReplayEndSeq
)

// Source is one publisher to follow: one engine, or one DP rank of an engine
// (each rank publishes on its own port, see OffsetPort).
type Source struct {
	// Name identifies the source in updates and stats (default: Live).
	Name string
	// Live is the publisher's live endpoint ("tcp://host:5557"). It is
	// dialed, unless Bind is set.
	Live string
	// Bind makes the Subscriber bind Live and let the publisher connect
	// (vLLM connects its PUB when its endpoint names a host, not "*").
	// A bound source accepts one connection at a time: a second one,
	// pending or established, is refused while the first is open (counted
	// in SourceStats.Refused as a policy violation), so no other peer can
	// interleave its sequence numbers with the engine's (each jump back a
	// reset) or speak for it. Refused rather than replacing the first: a
	// replacing rule would let any peer that can reach the port take the
	// engine's stream over at will. The engine's PUB reconnects on its
	// own once a dead connection is closed (heartbeat or TCP); use
	// Socket.Guard.Allow or CURVE so that only the engine can be first.
	Bind bool
	// Replay is the publisher's replay endpoint (its ROUTER, always bound
	// by the publisher), or "" if it has none: gaps are then reported lost
	// at once.
	Replay string
}

// Config configures a Subscriber. Handler is required; zero fields take the
// defaults.
type Config struct {
	// Release is the vLLM release the fleet runs (zero value: vllm.Latest).
	// The Subscriber accepts both event forms and both replay framings
	// whatever it says; it is kept for stats and future rules.
	Release vllm.Release
	// Handler receives every update.
	Handler Handler
	// Topic is the subscription prefix sent to every publisher ("" = all),
	// and replayed batches must carry a topic it prefixes.
	Topic string
	// FromStart makes a source joined mid-stream replay from sequence 0;
	// by default delivery starts at the first batch seen.
	FromStart bool
	// ReplayTimeout is the longest a replay may stay silent
	// (DefaultReplayTimeout); ReplayDeadline bounds it as a whole
	// (DefaultReplayDeadline).
	ReplayTimeout  time.Duration
	ReplayDeadline time.Duration
	// MaxReplays caps concurrent replays across sources (DefaultMaxReplays).
	// A source runs one replay at a time, so it holds at most one of these
	// slots; sources waiting for one are served in arrival order.
	MaxReplays int
	// ReplaySlice is how long a replay keeps its slot once another source
	// is waiting for one (DefaultReplaySlice, 1 s): it is then stopped,
	// keeps what it applied, and its source queues again (counted in
	// SourceStats.Preempted), so slow or hung replay servers cannot hold
	// the slots from an honest source for longer than one slice.
	ReplaySlice time.Duration
	// ReplayBackoff and ReplayBackoffMax pace a source's replays after
	// failures. A source waits out its back-off before it asks for a slot.
	ReplayBackoff, ReplayBackoffMax time.Duration
	// ReplayAttempts is how many replays in a row may fail to make
	// progress on a hole (no end marker, the error marker, replies missing
	// or out of order, or no new batch) before the rest of the hole is
	// reported lost (DefaultReplayAttempts, 3), or fewer if ReplayDeadline
	// has passed since the last progress; a replay server that cannot be
	// reached at all (the request not sent within ReplayTimeout) is not
	// asked again for that hole, so a source whose replay server is gone
	// is not held back for longer than before. A replay that delivered
	// something resets the count; a hole left after a complete replay (a
	// batch the live stream dropped while the replay ran) starts another
	// replay at once.
	ReplayAttempts int
	// MaxBuffered and MaxBufferedBytes bound the live batches one source
	// holds while it replays; past them (or past the source's share of
	// MemoryBudget) a live batch is not buffered (counted in
	// BufferOverflows) and is recovered from the replay, or reported lost
	// once the replay attempts are spent.
	MaxBuffered, MaxBufferedBytes int
	// MemoryBudget bounds, across all sources, the bytes of live batches
	// buffered during replays (each source may use MemoryBudget divided by
	// the sources followed, and at most MaxBufferedBytes), and is the
	// receive budget shared by every source's live and replay sockets
	// (Socket.Guard.Budget, unless set; fair per connection, see
	// zmtpguard.Budget; Socket.MemoryBudget then only turns it off when
	// negative). Default 128 MiB (DefaultMemoryBudget); raised to
	// twice the largest message if smaller. The Subscriber's memory under
	// attack is then about 3 × MemoryBudget plus per-connection buffers,
	// however many sources it follows.
	MemoryBudget int64
	// Limits bounds each payload (size before decode, event count).
	Limits Limits
	// Socket is the options of every source's SUB and replay DEALER
	// (transport limits, reconnect pacing). MaxMessageSize is raised to
	// hold Limits.MaxPayload when left smaller, and a positive MemoryBudget
	// then to at least twice it (the socket's default rule, so that
	// socket.DefaultOptions() works as given); a zero write buffer is set
	// small (4 KiB), since a subscriber writes only subscriptions and
	// replay requests.
	Socket socket.Options
	// Logger receives rate-limited lines about drops, gaps, lost ranges
	// and resets (nil: slog.Default()). Peer bytes appear only as hex.
	Logger *slog.Logger
	// LogInterval is the shortest time between two lines of one kind
	// (default 1 s).
	LogInterval time.Duration
}

func (c *Config) fill() error {
	if c.Handler == nil {
		return errors.New("kvevents: Config.Handler is required")
	}
	if c.ReplayTimeout < 0 || c.ReplayDeadline < 0 || c.MaxReplays < 0 || c.MaxBuffered < 0 || c.MaxBufferedBytes < 0 ||
		c.ReplaySlice < 0 || c.ReplayAttempts < 0 || c.MemoryBudget < 0 {
		return errors.New("kvevents: negative limit in Config")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.ReplayTimeout, DefaultReplayTimeout)
	def(&c.ReplayDeadline, DefaultReplayDeadline)
	def(&c.ReplayBackoff, DefaultReplayBackoff)
	def(&c.ReplayBackoffMax, DefaultReplayBackoffMax)
	def(&c.LogInterval, time.Second)
	def(&c.ReplaySlice, DefaultReplaySlice)
	if c.MaxReplays == 0 {
		c.MaxReplays = DefaultMaxReplays
	}
	if c.ReplayAttempts == 0 {
		c.ReplayAttempts = DefaultReplayAttempts
	}
	if c.MemoryBudget == 0 {
		c.MemoryBudget = DefaultMemoryBudget
	}
	if c.MaxBuffered == 0 {
		c.MaxBuffered = DefaultMaxBuffered
	}
	if c.MaxBufferedBytes == 0 {
		c.MaxBufferedBytes = DefaultMaxBufferedBytes
	}
	c.Limits = c.Limits.withDefaults()
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if need := int64(c.Limits.MaxPayload) + 64<<10; c.Socket.Guard.MaxMessageSize < need {
		c.Socket.Guard.MaxMessageSize = need
		// The socket's own rule for its default budget: twice the
		// largest message (a budget below it would refuse the options).
		if b := c.Socket.MemoryBudget; b > 0 && b < 2*need {
			c.Socket.MemoryBudget = 2 * need
		}
	}
	if c.Socket.Guard.WriteBufferSize == 0 {
		c.Socket.Guard.WriteBufferSize = 4 << 10
	}
	if min2 := 2 * c.Socket.Guard.MaxMessageSize; c.MemoryBudget < min2 {
		c.MemoryBudget = min2
	}
	if c.Socket.Guard.Budget == nil && c.Socket.MemoryBudget >= 0 {
		// One receive budget for every source's sockets: n sources no
		// longer mean n budgets.
		c.Socket.Guard.Budget = zmtpguard.NewBudget(c.MemoryBudget, c.Socket.BudgetWait)
	}
	return c.Socket.Verify()
}

// DPSources returns one Source per data-parallel rank of one engine, as
// vLLM lays them out: rank r publishes on live's and replay's ports + r
// (OffsetPort), and each rank is its own source, named "name/dp<r>", with
// its own sequence — never one identity for the whole pod.
func DPSources(name, live, replay string, ranks int) ([]Source, error) {
	if ranks < 1 {
		return nil, fmt.Errorf("kvevents: %d DP ranks", ranks)
	}
	out := make([]Source, 0, ranks)
	for r := range ranks {
		l, err := OffsetPort(live, r)
		if err != nil {
			return nil, err
		}
		rp, err := OffsetPort(replay, r)
		if err != nil {
			return nil, err
		}
		out = append(out, Source{Name: name + "/dp" + strconv.Itoa(r), Live: l, Replay: rp})
	}
	return out, nil
}

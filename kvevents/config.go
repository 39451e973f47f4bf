package kvevents

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/zmqguard/zmqguard/internal/ref/sockopt"
	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/vllm"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// Defaults for Config.
const (
	// defaultReplayTimeout is how long a replay may stay silent (no reply
	// message at all) before it is given up.
	defaultReplayTimeout = 10 * time.Second
	// defaultReplayDeadline bounds a whole replay, however chatty the
	// replay server is.
	defaultReplayDeadline = 60 * time.Second
	// defaultMaxReplays caps the replays running at once across all sources.
	defaultMaxReplays = 16
	// defaultReplaySlice is how long a replay keeps its slot while another
	// source waits for one (see Config.ReplaySlice).
	defaultReplaySlice = time.Second
	// defaultReplayAttempts is how many replays in a row may fail to make
	// progress on a hole before it is reported lost (Config.ReplayAttempts).
	defaultReplayAttempts = 3
	// defaultMemoryBudget bounds, across all sources, the bytes a
	// Subscriber holds (Config.MemoryBudget).
	defaultMemoryBudget = 128 << 20
	// defaultReplayBackoff is the first pause before a source's next replay
	// after one failed; it doubles per failure up to defaultReplayBackoffMax.
	defaultReplayBackoff    = 500 * time.Millisecond
	defaultReplayBackoffMax = 30 * time.Second
	// defaultEngineTTL is Config.EngineTTL's default.
	defaultEngineTTL = 10 * time.Minute
	// defaultFanInMaxTopics and defaultFanInMaxTopicsPerConn are
	// Config.FanInMaxTopics's and FanInMaxTopicsPerConn's defaults.
	defaultFanInMaxTopics        = 4096
	defaultFanInMaxTopicsPerConn = 16
	// defaultMaxBuffered bounds the live batches one source buffers while
	// its replay runs; defaultMaxBufferedBytes bounds their payload bytes.
	defaultMaxBuffered      = 4096
	defaultMaxBufferedBytes = 64 << 20 // one batch of defaultMaxPayload
	// maxLostRanges is how many recent lost ranges SourceStats keeps.
	maxLostRanges = 16
	// endSeq is the replay end marker's sequence number (-1 as 8 bytes),
	// replayEndSeq; replayErrorSeq (publisher.go) is the error marker's.
	endSeq = replayEndSeq
)

// Source is one publisher to follow: one engine, or one DP rank of an engine
// (each rank publishes on its own port, see DPSources).
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
	// Socket.Guard.Allow or CURVE so that only the engine can be first:
	// on an address beyond loopback, Add refuses a bound source without
	// them unless Config.AnyPeer is set.
	// Config.Socket.Guard.MaxConns does not apply to a bound source: this
	// rule is not a default a user value replaces.
	Bind bool
	// Replay is the publisher's replay endpoint (its ROUTER, always bound
	// by the publisher), or "" if it has none: gaps are then reported lost
	// at once.
	Replay string
	// Resume, when set, starts the source as if the batch it names had
	// been delivered (a Position kept from an earlier Subscriber): nothing
	// newer is delivered before continuity with it is proven.
	Resume *Position
	// Engine is the engine publishing: "" or "vllm", or "sglang". Both
	// engines' bytes decode either way; it decides only how an array-form
	// event's elements after the fields the engines share are read: as
	// vLLM's fields at those positions, or, for "sglang", as elements
	// SGLang may add later, read past and counted (Batch.UnknownFields).
	// Anything else is refused by Add.
	Engine string
	// FanIn makes the source a fan-in endpoint (llm-d's topology): the
	// Subscriber binds Live and any number of engines connect to it, each
	// distinct topic its own engine, named by its topic in updates and
	// stats, with the sequence, continuity and replay rules of a dialed
	// source. Bind and Replay are ignored; see docs/kv-events.md,
	// "Fan-in", for who may publish a topic (Config.FanInAnyAddress) and
	// the bounds (Config.FanInMaxTopics).
	FanIn bool
	// ReplayTemplate derives, in a fan-in source, each engine's replay
	// endpoint from its topic kv@{host}@{model} (llm-d's convention): every
	// "{host}" is replaced by the topic's host part, so "tcp://{host}:5558".
	// Empty, or a topic not of that form: no replay, gaps are lost ranges.
	ReplayTemplate string
}

// Config configures a Subscriber. Handler is required; zero fields take the
// defaults.
type Config struct {
	// Release is the vLLM release the fleet runs (zero value: vllm.Latest).
	// The Subscriber accepts both event forms and both replay framings
	// whatever it says; it is kept for stats and future rules.
	Release vllm.Release
	// Handler receives every update. For one source it is called in sequence order,
	// never concurrently; for different sources it is called concurrently, from
	// the sources' own goroutines. It must return promptly (it holds up only
	// its own source). A non-nil error ends Run with it.
	//
	// The Handler runs under no lock of the Subscriber's, so it may call
	// any of its methods: Stats, Endpoint, Add, Resync, and Remove (of its
	// own source or any other) and Close, which never wait for a Handler
	// call to return (see [Subscriber.Remove] and [Subscriber.Close]). The
	// Handler's ctx is cancelled as soon as its source is removed or the
	// Subscriber closes (or Run's ctx ends). Calls for one source are one at
	// a time, in order; a Handler that never returns holds up its own source
	// and Run's return, nothing else.
	Handler func(ctx context.Context, u Update) error
	// Topic is the subscription prefix sent to every publisher ("" = all),
	// and replayed batches must carry a topic it prefixes.
	Topic string
	// FromStart makes a source joined mid-stream replay from sequence 0;
	// by default delivery starts at the first batch seen.
	FromStart bool
	// ReplayTimeout is the longest a replay may stay silent (no reply at
	// all). Zero means 10 s.
	ReplayTimeout time.Duration
	// ReplayDeadline bounds a whole replay, however chatty the replay
	// server is. Zero means 60 s.
	ReplayDeadline time.Duration
	// MaxReplays caps concurrent replays across sources. Zero means 16.
	// A source runs one replay at a time, so it holds at most one of these
	// slots; sources waiting for one are served in arrival order.
	MaxReplays int
	// ReplaySlice is how long a replay keeps its slot once another source
	// is waiting for one (zero means 1 s): it is then stopped,
	// keeps what it applied, and its source queues again (counted in
	// SourceStats.Preempted), so slow or hung replay servers cannot hold
	// the slots from an honest source for longer than one slice.
	ReplaySlice time.Duration
	// ReplayBackoff is a source's pause before its next replay after one
	// failed; it doubles per failure up to ReplayBackoffMax. A source waits
	// out its back-off before it asks for a slot. Zero means 500 ms.
	ReplayBackoff time.Duration
	// ReplayBackoffMax caps ReplayBackoff's doubling. Zero means 30 s.
	ReplayBackoffMax time.Duration
	// ReplayAttempts is how many replays in a row may fail to make
	// progress on a hole (no end marker, the error marker, replies missing
	// or out of order, or no new batch) before the rest of the hole is
	// reported lost (zero means 3), or fewer if ReplayDeadline
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
	// once the replay attempts are spent. Zero means 4096 batches and
	// 64 MiB.
	MaxBuffered, MaxBufferedBytes int
	// MemoryBudget bounds, across all sources, the bytes of live batches
	// buffered during replays (each source may use MemoryBudget divided by
	// the sources followed, and at most MaxBufferedBytes), and is the
	// receive budget shared by every source's live and replay sockets
	// (Socket.Guard.Budget, unless set; fair per connection, see
	// zmtpguard.Budget; Socket.MemoryBudget may be zero or equal to
	// MemoryBudget, another positive value is refused, a negative one turns
	// the receive budget off). The buffered batches are charged to that receive budget
	// too (zmtpguard.Budget.Charge), so buffers and reads are bounded
	// together. Zero means 128 MiB; a value under twice the largest
	// message (Socket.Guard.MaxMessageSize) is raised to it. The
	// Subscriber's live data under attack are then under about
	// 2 × MemoryBudget (fair-share reads may pass the budget, never twice
	// it) plus per-connection buffers and the batch being decoded, however
	// many sources it follows. Go's collector lets the heap, and the
	// resident set with it, grow to about twice what is live unless the
	// program sets a memory limit (GOMEMLIMIT; zmqguard kv-events sets
	// 2 × MemoryBudget + 64 MiB): see docs/kv-events.md, "Memory".
	MemoryBudget int64
	// MaxPayload is the longest batch payload accepted, checked before
	// anything is decoded. Zero means 64 MiB: about 13 million token ids,
	// such as a "full" report-mode step (vLLM PR #45261) admitting 100
	// requests with 128k-token cached prefixes.
	MaxPayload int
	// MaxEvents is the most events one batch may hold. Zero means 65,536,
	// above what a step of vLLM's server defaults can produce.
	MaxEvents int
	// DecodeBlockInactive delivers vLLM's BlockInactive events (vLLM PR
	// #50732, not merged: GPU blocks no request references any more, still
	// cached) as events of Type "BlockInactive" with BlockHashes, Medium
	// and GroupIdx, instead of dropping them as an unsupported type
	// (counted per type name in SourceStats.UnsupportedTypes, the
	// default).
	DecodeBlockInactive bool
	// Socket is the options of every source's SUB and replay DEALER
	// (transport limits, reconnect pacing). A zero Guard.WriteBufferSize
	// means 4 KiB (a subscriber writes only subscriptions and replay
	// requests). Guard.MaxMessageSize is raised to hold MaxPayload (plus
	// 64 KiB of framing) when it is smaller, with a line logged if the
	// value was set, and a positive MemoryBudget then to twice it. A bound
	// source's Guard.MaxConns is always 1 (see Source.Bind). A nil
	// Socket.Logger means Logger.
	Socket socket.Options
	// Logger receives rate-limited lines about drops, gaps, lost ranges
	// and resets. Nil means slog.Default(). Peer bytes appear only
	// escaped.
	Logger *slog.Logger
	// LogInterval is the shortest time between two lines of one kind.
	// Zero means 1 s.
	LogInterval time.Duration
	// AnyPeer lets a bound source (Source.Bind) listen on an address
	// other than loopback without Socket.Guard.Allow or Socket.Guard.Curve.
	// Without it Add refuses such a source, the way Redis's protected mode
	// refuses outside clients until told otherwise: a bound slot admits
	// one publisher at a time, so without an allow-list or CURVE keys the
	// first peer that reaches the port would speak for the engine.
	AnyPeer bool
	// EngineTTL is how long an engine's connection may stay gone before
	// the engine is retired: its Handler gets one UpdateDeparted, its
	// state is freed, and a return is a new run. For a dialed or bound
	// source "gone" means no live connection on its socket since the last
	// one closed (the source stays followed and keeps dialing); for a
	// fan-in engine, its topic's connection closed (the topic is
	// forgotten). An engine that stays connected is never retired, however
	// idle. Zero means 10 minutes; negative never retires.
	EngineTTL time.Duration
	// FanInAnyAddress turns off a fan-in source's address check: by
	// default a topic whose host part is an IP address (kv@10.0.0.7@m) is
	// accepted only from a connection from that address. Set it behind
	// proxies and meshes that rewrite source addresses.
	FanInAnyAddress bool
	// FanInMaxTopics bounds the topics (engines) one fan-in source follows
	// at once, FanInMaxTopicsPerConn those one connection may publish;
	// past them a new topic is refused (counted, logged). Zero means 4096
	// and 16.
	FanInMaxTopics, FanInMaxTopicsPerConn int
}

// checkExposed refuses a bound source on a non-loopback address that any
// peer could reach first (see Config.AnyPeer).
func (c *Config) checkExposed(src Source) error {
	if !src.Bind || c.AnyPeer || len(c.Socket.Guard.Allow) > 0 || c.Socket.Guard.Curve != nil || loopbackEndpoint(src.Live) {
		return nil
	}
	return fmt.Errorf("kvevents: source %s binds %s, reachable beyond loopback, with no allow-list and no CURVE keys: "+
		"any peer could take the engine's stream by connecting first; set Socket.Guard.Allow (--allow) or CURVE keys, or Config.AnyPeer (--any-peer) to accept any peer",
		ratelog.Escape(src.Name, 128), ratelog.Escape(src.Live, 128))
}

// loopbackEndpoint reports whether an endpoint is reachable only from this
// host: tcp on a loopback address or "localhost", ipc, inproc.
func loopbackEndpoint(ep string) bool {
	scheme, rest, ok := strings.Cut(ep, "://")
	if !ok {
		return false
	}
	switch scheme {
	case "ipc", "inproc":
		return true
	case "tcp":
	default:
		return false
	}
	host, _, err := net.SplitHostPort(rest)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// fill fills c's defaults, then verifies the filled values (the
// constructor's order: the values checked are the values used).
func (c *Config) fill() error {
	if c.Handler == nil {
		return errors.New("kvevents: Config.Handler is required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.ReplayTimeout, defaultReplayTimeout)
	def(&c.ReplayDeadline, defaultReplayDeadline)
	def(&c.ReplayBackoff, defaultReplayBackoff)
	def(&c.ReplayBackoffMax, defaultReplayBackoffMax)
	def(&c.LogInterval, time.Second)
	def(&c.ReplaySlice, defaultReplaySlice)
	def(&c.EngineTTL, defaultEngineTTL)
	defInt := func(d *int, v int) {
		if *d == 0 {
			*d = v
		}
	}
	defInt(&c.MaxReplays, defaultMaxReplays)
	defInt(&c.ReplayAttempts, defaultReplayAttempts)
	defInt(&c.MaxBuffered, defaultMaxBuffered)
	defInt(&c.MaxBufferedBytes, defaultMaxBufferedBytes)
	defInt(&c.MaxPayload, defaultMaxPayload)
	defInt(&c.MaxEvents, defaultMaxEvents)
	defInt(&c.FanInMaxTopics, defaultFanInMaxTopics)
	defInt(&c.FanInMaxTopicsPerConn, defaultFanInMaxTopicsPerConn)
	if c.MemoryBudget == 0 {
		c.MemoryBudget = defaultMemoryBudget
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Socket.Logger == nil {
		c.Socket.Logger = c.Logger // the sockets' lines go where the Subscriber's go
	}
	for _, f := range []struct {
		name string
		v    int64
		show string
	}{
		{"ReplayTimeout", int64(c.ReplayTimeout), c.ReplayTimeout.String()},
		{"ReplayDeadline", int64(c.ReplayDeadline), c.ReplayDeadline.String()},
		{"ReplaySlice", int64(c.ReplaySlice), c.ReplaySlice.String()},
		{"ReplayBackoff", int64(c.ReplayBackoff), c.ReplayBackoff.String()},
		{"ReplayBackoffMax", int64(c.ReplayBackoffMax), c.ReplayBackoffMax.String()},
		{"LogInterval", int64(c.LogInterval), c.LogInterval.String()},
		{"MaxReplays", int64(c.MaxReplays), strconv.Itoa(c.MaxReplays)},
		{"ReplayAttempts", int64(c.ReplayAttempts), strconv.Itoa(c.ReplayAttempts)},
		{"MaxBuffered", int64(c.MaxBuffered), strconv.Itoa(c.MaxBuffered)},
		{"MaxBufferedBytes", int64(c.MaxBufferedBytes), strconv.Itoa(c.MaxBufferedBytes)},
		{"MaxPayload", int64(c.MaxPayload), strconv.Itoa(c.MaxPayload)},
		{"MaxEvents", int64(c.MaxEvents), strconv.Itoa(c.MaxEvents)},
		{"MemoryBudget", c.MemoryBudget, strconv.FormatInt(c.MemoryBudget, 10)},
		{"FanInMaxTopics", int64(c.FanInMaxTopics), strconv.Itoa(c.FanInMaxTopics)},
		{"FanInMaxTopicsPerConn", int64(c.FanInMaxTopicsPerConn), strconv.Itoa(c.FanInMaxTopicsPerConn)},
	} {
		if f.v < 0 {
			return fmt.Errorf("kvevents: Config.%s %s is negative", f.name, f.show)
		}
	}
	if c.ReplayBackoffMax < c.ReplayBackoff {
		return fmt.Errorf("kvevents: Config.ReplayBackoffMax %v is below ReplayBackoff %v", c.ReplayBackoffMax, c.ReplayBackoff)
	}
	// The socket: a message must hold a whole payload plus framing (a
	// floor, logged when it raises the user's value), and a subscriber
	// writes little.
	user := c.Socket.Guard.MaxMessageSize
	need := int64(c.MaxPayload) + 64<<10
	var raised bool
	c.Socket, raised = sockopt.Apply(c.Socket, sockopt.Overrides{MinMessageSize: need, WriteBufferSize: 4 << 10})
	if raised {
		c.Logger.Warn("kvevents: Config.Socket.Guard.MaxMessageSize raised to hold Config.MaxPayload",
			"component", "kvevents", "from", user, "to", need)
	}
	if min2 := 2 * c.Socket.Guard.MaxMessageSize; c.MemoryBudget < min2 {
		c.MemoryBudget = min2
	}
	if c.Socket.Guard.Budget == nil && c.Socket.MemoryBudget >= 0 {
		if m := c.Socket.MemoryBudget; m > 0 && m != c.MemoryBudget {
			return fmt.Errorf("kvevents: Config.Socket.MemoryBudget %d differs from Config.MemoryBudget %d, the budget every source's sockets share: set MemoryBudget", m, c.MemoryBudget)
		}
		// One receive budget for every source's sockets: n sources no
		// longer mean n budgets.
		c.Socket.Guard.Budget = &zmtpguard.Budget{Limit: c.MemoryBudget, Wait: c.Socket.BudgetWait}
	}
	return sockopt.Verify(c.Socket)
}

// lim is the decoder's limits (c filled).
func (c *Config) lim() limits {
	return limits{MaxPayload: c.MaxPayload, MaxEvents: c.MaxEvents, Inactive: c.DecodeBlockInactive}
}

// DPSources returns one Source per data-parallel rank of one engine, as
// vLLM lays them out: rank r publishes on live's and replay's endpoints
// offset by r (tcp ports + r, inproc names + "_dp<r>"), and each rank is
// its own source, named "name/dp<r>", with its own sequence — never one
// identity for the whole pod.
func DPSources(name, live, replay string, ranks int) ([]Source, error) {
	if ranks < 1 {
		return nil, fmt.Errorf("kvevents: %d DP ranks", ranks)
	}
	out := make([]Source, 0, ranks)
	for r := range ranks {
		l, err := offsetPort(live, r)
		if err != nil {
			return nil, err
		}
		rp, err := offsetPort(replay, r)
		if err != nil {
			return nil, err
		}
		out = append(out, Source{Name: name + "/dp" + strconv.Itoa(r), Live: l, Replay: rp})
	}
	return out, nil
}

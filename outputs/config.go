package outputs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/vllm"
)

// Config configures a [Receiver]. Handler is required; every other zero
// field means the default its doc states, and a negative number is an
// error [New] names.
type Config struct {
	// Name names the receiver in logs and errors; empty means "outputs".
	Name string
	// Logger receives drop and peer lines; nil means slog.Default().
	Logger *slog.Logger
	// Release is the vLLM release the engines run (zero value: vllm.Latest).
	// Every release's EngineCoreOutputs shape decodes (missing trailing
	// fields take their defaults, newer ones are skipped), so no field set
	// depends on it today; it is reported in Stats.
	Release vllm.Release
	// Socket configures the PULL socket. Zero fields take socket's
	// defaults, except Guard.MaxFrames and Guard.MaxMessageSize: zero means
	// 4096 frames and 64 MiB, sized for one engine step of a large engine
	// (see the package doc); New logs a warning for a frame limit below
	// 4096. The socket's MemoryBudget (zero means twice MaxMessageSize)
	// still bounds what all connections hold together.
	Socket socket.Options
	// Limits bounds the decode. Zero fields take enginecore's defaults,
	// except: Limits.MaxFrames zero means the socket's frame limit,
	// Limits.Scan.MaxBytes zero the socket's message size limit, and
	// Limits.Scan.MaxElements zero means 1<<22 (a step of 1024 outputs has
	// about 100 objects each).
	Limits enginecore.Limits
	// Engines is the number of engines: a message whose engine_index is
	// not in [0, Engines) is dropped (ReasonUnknownRank). Zero means any
	// index.
	Engines int
	// Handler receives each valid message (required). m and everything in it (request
	// ids, array data) alias the receiver's copy of the frames and are valid
	// only until it returns. A nil return goes on; a classified
	// *decodeguard.Error drops the message under its reason; any other error
	// ends Run.
	//
	// Concurrency: each connection (engine) has a worker goroutine of its own
	// that calls Handler, OnNotification and OnEngineDead for that
	// connection's messages, one at a time and in the order it sent them;
	// calls for different connections may run at the same time, so that one
	// engine's huge messages do not hold the others' up (see ConnQueueBytes).
	// A Handler that shares state across engines must lock it. OnDrop runs in
	// Run's receive goroutine, or in a worker for a message its Handler
	// dropped. No callback holds a lock of the Receiver: each may call the
	// Receiver's Stats, Endpoint and Close (Close from inside makes Run return
	// loop.ErrLoopClosed once the callback has returned). Config.Socket.OnEvent
	// runs on the socket's goroutines and may call the same (see
	// socket.Options.OnEvent). A callback must not wait for Run to return: Run
	// waits for it.
	Handler func(ctx context.Context, m *enginecore.Message, from *socket.Peer) error
	// OnNotification, if set, is called (from Run's goroutine, before
	// Handler) for each message whose utility output carries a negative
	// call id: an elastic-EP notification (-1) or a fault-tolerance status
	// (-2), typed, or another negative id from a later vLLM, untyped. The
	// message also reaches Handler. A -1 or -2 whose result does not have
	// vLLM's shape is dropped (ReasonValidate) before either.
	OnNotification func(Notification)
	// OnEngineDead is called for each ENGINE_CORE_DEAD from a connection
	// that holds an engine index, once per engine it holds (see the
	// package doc). A sentinel from any other connection is dropped and
	// counted (Stats.UnattributedDead) without a call. The sentinel never
	// ends Run, with or without OnEngineDead; to stop as vLLM's client
	// does, call Close from here. It may call Stats and Close, like
	// Handler.
	OnEngineDead func(EngineDeadError)
	// OnDrop, if set, is called for every dropped message (synchronously;
	// it must not block). It may call Stats and Close, like Handler.
	OnDrop func(loop.Drop)
	// ConnQueueBytes bounds the bytes of valid messages one connection
	// may have waiting for its handler (zero means the default: the
	// socket's MaxMessageSize, 64 MiB unless changed). A queued message
	// counts its wire bytes plus what its decoded request outputs take
	// (1,152 bytes each on 64-bit platforms). Once a connection's queue
	// holds this much, its reader is held (TCP flow control slows that
	// engine alone) until its handler has caught up; a message it had read
	// already is still queued. A connection with two messages over 1 MiB
	// waiting is held as well, whatever this bound: its worker renders them
	// one at a time, and more of them would only fill the socket's receive
	// queue, which all connections share in order, ahead of the other
	// engines' messages. Negative is an error.
	ConnQueueBytes int64
	// QueueBytes bounds the bytes (counted as for ConnQueueBytes) of valid
	// messages all connections have waiting for their handlers together
	// (zero means the default: four times the socket's MaxMessageSize, 256
	// MiB unless changed). Beyond it, a connection whose queue holds more
	// than its share (QueueBytes divided by the connections with messages
	// queued) is held as at ConnQueueBytes, so an engine within its share
	// is never slowed by the others. What the held connections had sent
	// already still arrives (the socket holds at most twice its
	// MemoryBudget): the receive loop itself waits only past QueueBytes
	// plus that. Handlers of messages over 1 MiB run on at most half the
	// CPUs (GOMAXPROCS, at least one) at once, so that rendering huge
	// messages leaves a CPU to the other engines. It must not be below
	// ConnQueueBytes; negative is an error.
	QueueBytes int64
	// AnyPeer lets Bind serve a TCP address other than loopback with no
	// source allowlist (Socket.Guard.Allow) and no CURVE
	// (Socket.Guard.Curve). Without it such a Bind is refused: the first
	// connection to claim an engine index holds it (see the package doc),
	// so a port open to anyone lets anyone speak for an engine, or take
	// its index while the engine restarts.
	AnyPeer bool
}

// Notification is a message an engine sent unasked under a negative
// utility call id (see Config.OnNotification).
type Notification struct {
	// Engine is the message's engine_index; Peer the connection's address.
	Engine int64
	Peer   string
	// CallID is the negative call id: -1 (elastic EP), -2 (fault
	// tolerance) or another.
	CallID int64
	// EEP is set for an elastic-EP notification (CallID -1), FT for a
	// fault-tolerance status (CallID -2); both are nil for another id.
	EEP *enginecore.EEPNotification
	FT  *enginecore.FTStatus
}

// The receiver's limits, sized for what one engine step of a large engine
// sends. vLLM's max_num_seqs defaults to 1024 on large GPUs, so one
// EngineCoreOutputs carries up to 1024 request outputs, and each may hold
// arrays that travel in aux frames of their own once they reach 256 bytes:
// new_logprobs (3 arrays), new_prompt_logprobs_tensors (3),
// pooling_output (1) and routed_experts (1). A step with logprobs on every
// sequence needs 1 + 1024 × 3 = 3073 frames, so defaultMaxFrames is 4096.
// Sizes: 1024 pooling outputs of 4096 float32 are 1024 × 16 KiB = 16 MiB;
// prompt logprobs of one 32k-token prompt with 20 logprobs are 32768 × 21 ×
// (8 + 4) + 32768 × 8 bytes ≈ 8.5 MB; routed experts of one 8192-token
// prefill chunk of a 61-layer, top-8 model are 8192 × 61 × 8 × 2 bytes ≈
// 8 MB. defaultMaxMessageSize (64 MiB) leaves room for these together; a
// step beyond it is refused (ReasonOversize) rather than buffered.
// defaultMaxElements bounds the msgpack objects of the body (frame 0): a
// step of 1024 outputs has about 100 each.
const (
	defaultMaxFrames      = 4096
	defaultMaxMessageSize = 64 << 20
	defaultMaxElements    = 1 << 22
)

// maxTrackedEngines bounds the per-engine statistics: engine indices seen
// beyond this many distinct ones are counted in the totals only.
const maxTrackedEngines = 1024

// maxTrackedPeers bounds the connection-to-engine map (a variable for
// tests).
var maxTrackedPeers = 4096

// maxClaimsPerConnection bounds the engine indices one connection may hold
// (a vLLM engine core holds one on its own connection): beyond it, a
// claim of another index is dropped (ReasonPolicy), so that one
// connection cannot take every free index.
const maxClaimsPerConnection = 64

// withDefaults fills the Config fields whose default does not depend on
// the socket (the queue and decode limits that do are filled in New).
func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = "outputs"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Limits.Scan.MaxElements == 0 {
		c.Limits.Scan.MaxElements = defaultMaxElements
	}
	return c
}

// verify checks a Config whose defaults are filled.
func (c *Config) verify() error {
	if c.Handler == nil {
		return errors.New("outputs: Config.Handler is nil; it is required")
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"Engines", int64(c.Engines)},
		{"ConnQueueBytes", c.ConnQueueBytes},
		{"QueueBytes", c.QueueBytes},
		{"Limits.MaxFrames", int64(c.Limits.MaxFrames)},
		{"Limits.Scan.MaxBytes", int64(c.Limits.Scan.MaxBytes)},
		{"Limits.Scan.MaxElements", int64(c.Limits.Scan.MaxElements)},
		{"Limits.Scan.MaxDepth", int64(c.Limits.Scan.MaxDepth)},
	} {
		if f.v < 0 {
			return fmt.Errorf("outputs: Config.%s %d is negative", f.name, f.v)
		}
	}
	return nil
}

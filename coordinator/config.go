package coordinator

import (
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/zmqguard/zmqguard/internal/ref/dpwire"
	"github.com/zmqguard/zmqguard/internal/ref/sockopt"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/vllm"
)

// Config configures a [Coordinator]. Front, BackOutput, BackPublish and
// Engines are required; every other zero field means the default its doc
// states. A negative value is an error [New] names, except where a field's
// doc gives it a meaning (ReadyInterval).
type Config struct {
	// Front is the endpoint the front publish (XPUB) socket binds, for the
	// API front-ends: "tcp://host:port" (port 0 picks a free port, see
	// Coordinator.FrontEndpoint) or "ipc://path".
	Front string
	// BackOutput is the endpoint the back output (PULL) socket binds; the
	// engines push their EngineCoreOutputs to it.
	BackOutput string
	// BackPublish is the endpoint the back publish (XPUB) socket binds; the
	// engines subscribe to it and receive READY and START_DP_WAVE.
	BackPublish string
	// Engines is the data-parallel size: how many engine subscriptions
	// start-up waits for.
	Engines int

	// StatsInterval is the stats publication period while stats change
	// (vLLM's min_stats_update_interval_ms); zero means 100 ms.
	// IdleInterval is the period when they do not; zero means 5 s.
	StatsInterval time.Duration
	IdleInterval  time.Duration
	// StartupDeadline bounds start-up: if the engines have not all
	// subscribed by then, Run returns a *StartupTimeoutError. Zero means no
	// bound: it waits as long as it takes, as vLLM does, logging every 10 s
	// how many engines are still missing.
	StartupDeadline time.Duration
	// MaxMessageSize bounds one message on every socket (and the decode of
	// one engine output) where Socket.Guard.MaxMessageSize is zero (an
	// explicit socket value wins); zero means the socket default, 1 MiB.
	// A peer that exceeds it is disconnected by the socket layer.
	MaxMessageSize int64
	// MaxEngines bounds the engine count, at start and from
	// SCALE_ELASTIC_EP; at most 65536 (the 2-byte engine identity). Zero
	// means 4 times Engines, at least 8 and at most 4096 (Engines may then
	// be at most 4096), so that one scale notice from any front-end cannot
	// make every later publication huge (a publication carries about 13
	// bytes per engine).
	MaxEngines int
	// Release is the vLLM release the engines and front-ends run (the zero
	// value is vllm.Latest): it selects the stats publication layout, the
	// wake rule and the scale-up rule (see the package documentation).
	Release vllm.Release
	// DisableWaveCoordination mirrors vLLM's enable_wave_coordination=False.
	DisableWaveCoordination bool
	// ReadyInterval is the shortest time between two READY broadcasts after
	// start-up; zero means 100 ms. Every engine subscription
	// ("\x01") asks for READY; the ones that arrive within ReadyInterval of
	// the last READY share one, sent when the interval is over, so a newly
	// subscribed engine gets READY within ReadyInterval and a flood of
	// subscriptions cannot fill the engines' queues with READY (where it
	// would crowd out START_DP_WAVE). Negative: every subscription gets its
	// own READY at once, as in vLLM.
	ReadyInterval time.Duration
	// ScaleFrom, when not empty, lists the hosts (IP addresses, e.g.
	// "10.0.0.7" or "::1") whose front-end connections may send
	// SCALE_ELASTIC_EP; a notice from any other peer is a ReasonPolicy
	// drop. Empty (the default) takes it from any front-end, as vLLM does;
	// MaxEngines bounds it either way.
	ScaleFrom []string

	// Socket holds the options of the three sockets (limits, HWM, handshake
	// deadline, allowlist, events). Where Socket.Guard.MaxMessageSize is
	// zero, MaxMessageSize applies; where Socket.Logger is nil, Logger.
	Socket socket.Options
	// Logger receives start-up progress and rate-limited drop lines; nil
	// means slog.Default().
	Logger *slog.Logger
	// LogInterval is the shortest time between two summary lines of one
	// drop reason on one socket; zero means 1 s.
	LogInterval time.Duration
	// OnDrop, if set, is called for every dropped message, whichever stage
	// dropped it (decode, validation or the state machine). It runs on the
	// coordinator's goroutines: keep it fast and never block in it. It may
	// call Stats and Close (Close never waits for Run or for OnDrop); Run
	// returns ErrClosed once OnDrop has returned, and closes the sockets
	// then.
	OnDrop func(loop.Drop)
}

// withDefaults returns c with every zero field that has a default set to
// it (ReadyInterval keeps a negative value: off).
func (c Config) withDefaults() Config {
	if c.StatsInterval == 0 {
		c.StatsInterval = defaultStatsInterval
	}
	if c.IdleInterval == 0 {
		c.IdleInterval = defaultIdleInterval
	}
	if c.MaxEngines == 0 {
		c.MaxEngines = defaultMaxEngines
		if c.Engines <= defaultMaxEngines/defaultScaleFactor {
			c.MaxEngines = max(defaultScaleFactor*c.Engines, defaultMinMaxEngines)
		}
	}
	if c.ReadyInterval == 0 {
		c.ReadyInterval = defaultReadyInterval
	}
	if c.LogInterval == 0 {
		c.LogInterval = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// verify checks a Config whose defaults are filled, and returns the
// ScaleFrom hosts as a set (nil when empty).
func (c *Config) verify() (map[string]bool, error) {
	if c.Front == "" || c.BackOutput == "" || c.BackPublish == "" {
		return nil, fmt.Errorf("coordinator: Config.Front %q, BackOutput %q, BackPublish %q: all three endpoints are required", c.Front, c.BackOutput, c.BackPublish)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"StatsInterval", c.StatsInterval}, {"IdleInterval", c.IdleInterval}, {"StartupDeadline", c.StartupDeadline}, {"LogInterval", c.LogInterval}} {
		if d.v < 0 {
			return nil, fmt.Errorf("coordinator: Config.%s %v is negative", d.name, d.v)
		}
	}
	if c.MaxMessageSize < 0 {
		return nil, fmt.Errorf("coordinator: Config.MaxMessageSize %d is negative", c.MaxMessageSize)
	}
	if c.MaxEngines < 1 || c.MaxEngines > dpwire.MaxEngines {
		return nil, fmt.Errorf("coordinator: Config.MaxEngines %d is not in [1, %d]", c.MaxEngines, dpwire.MaxEngines)
	}
	if c.Engines < 1 || c.Engines > c.MaxEngines {
		return nil, fmt.Errorf("coordinator: Config.Engines %d is not in [1, %d] (MaxEngines)", c.Engines, c.MaxEngines)
	}
	var scaleFrom map[string]bool
	for _, h := range c.ScaleFrom {
		ip, err := netip.ParseAddr(h)
		if err != nil {
			return nil, fmt.Errorf("coordinator: Config.ScaleFrom %q is not an IP address", h)
		}
		if scaleFrom == nil {
			scaleFrom = map[string]bool{}
		}
		scaleFrom[ip.Unmap().String()] = true
	}
	return scaleFrom, nil
}

// socketOptions returns the options of the three sockets: Socket with
// MaxMessageSize and Logger where the user left them zero, verified.
func (c *Config) socketOptions() (socket.Options, error) {
	opts, _ := sockopt.Apply(c.Socket, sockopt.Overrides{MaxMessageSize: c.MaxMessageSize, Logger: c.Logger})
	if err := sockopt.Verify(opts); err != nil {
		return opts, fmt.Errorf("coordinator: Config.Socket: %w", err)
	}
	return opts, nil
}

package kvevents

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/socket"
)

func nopHandler(context.Context, Update) error { return nil }

// TestConfigDefaults: a zero Config takes the values its field docs state,
// filled before anything is verified.
func TestConfigDefaults(t *testing.T) {
	c := Config{Handler: nopHandler, Logger: quiet}
	if err := c.fill(); err != nil {
		t.Fatal(err)
	}
	for _, d := range []struct {
		name      string
		got, want any
	}{
		{"ReplayTimeout", c.ReplayTimeout, 10 * time.Second},
		{"ReplayDeadline", c.ReplayDeadline, 60 * time.Second},
		{"MaxReplays", c.MaxReplays, 16},
		{"ReplaySlice", c.ReplaySlice, time.Second},
		{"ReplayBackoff", c.ReplayBackoff, 500 * time.Millisecond},
		{"ReplayBackoffMax", c.ReplayBackoffMax, 30 * time.Second},
		{"ReplayAttempts", c.ReplayAttempts, 3},
		{"MaxBuffered", c.MaxBuffered, 4096},
		{"MaxBufferedBytes", c.MaxBufferedBytes, 64 << 20},
		{"MemoryBudget", c.MemoryBudget, int64(128<<20) + 2*(64<<10)},
		{"MaxPayload", c.MaxPayload, 64 << 20},
		{"MaxEvents", c.MaxEvents, 65536},
		{"LogInterval", c.LogInterval, time.Second},
		{"Socket.Guard.MaxMessageSize", c.Socket.Guard.MaxMessageSize, int64(64<<20 + 64<<10)},
		{"Socket.Guard.WriteBufferSize", c.Socket.Guard.WriteBufferSize, 4 << 10},
		{"Socket.Logger", c.Socket.Logger, quiet}, // the sockets' lines go where the Subscriber's go
	} {
		if d.got != d.want {
			t.Errorf("%s = %v, want %v", d.name, d.got, d.want)
		}
	}
}

// TestConfigNegative: a negative value is an error naming the field and the
// value, never a silent default or "off" (a negative LogInterval turned
// rate limiting off before).
func TestConfigNegative(t *testing.T) {
	for _, c := range []struct {
		field string
		set   func(*Config)
		value string
	}{
		{"ReplayTimeout", func(c *Config) { c.ReplayTimeout = -time.Second }, "-1s"},
		{"ReplayDeadline", func(c *Config) { c.ReplayDeadline = -time.Second }, "-1s"},
		{"ReplaySlice", func(c *Config) { c.ReplaySlice = -time.Second }, "-1s"},
		{"ReplayBackoff", func(c *Config) { c.ReplayBackoff = -time.Second }, "-1s"},
		{"ReplayBackoffMax", func(c *Config) { c.ReplayBackoffMax = -time.Second }, "-1s"},
		{"LogInterval", func(c *Config) { c.LogInterval = -time.Second }, "-1s"},
		{"MaxReplays", func(c *Config) { c.MaxReplays = -2 }, "-2"},
		{"ReplayAttempts", func(c *Config) { c.ReplayAttempts = -2 }, "-2"},
		{"MaxBuffered", func(c *Config) { c.MaxBuffered = -2 }, "-2"},
		{"MaxBufferedBytes", func(c *Config) { c.MaxBufferedBytes = -2 }, "-2"},
		{"MaxPayload", func(c *Config) { c.MaxPayload = -2 }, "-2"},
		{"MaxEvents", func(c *Config) { c.MaxEvents = -2 }, "-2"},
		{"MemoryBudget", func(c *Config) { c.MemoryBudget = -2 }, "-2"},
	} {
		cfg := Config{Handler: nopHandler, Logger: quiet}
		c.set(&cfg)
		s, err := NewSubscriber(cfg)
		if err == nil {
			s.Close()
			t.Errorf("%s %s accepted", c.field, c.value)
			continue
		}
		if want := "kvevents: Config." + c.field + " " + c.value + " "; !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s %s: error %q, want one line starting %q", c.field, c.value, err, want)
		}
	}
	cfg := Config{Handler: nopHandler, Logger: quiet, ReplayBackoff: time.Minute}
	if _, err := NewSubscriber(cfg); err == nil || !strings.Contains(err.Error(), "ReplayBackoffMax 30s") {
		t.Errorf("back-off above its cap: %v", err)
	}
}

// TestConfigOneBudget (issue 40): Config.MemoryBudget is the receive
// budget every source's sockets share; a Socket.MemoryBudget equal to it
// is accepted, another positive one refused naming both (it used to be
// ignored silently), a negative one turns the receive budget off.
func TestConfigOneBudget(t *testing.T) {
	const mb = 256 << 20
	ok := Config{Handler: nopHandler, Logger: quiet, MemoryBudget: mb, Socket: socket.Options{MemoryBudget: mb}}
	if err := ok.fill(); err != nil || ok.Socket.Guard.Budget == nil || ok.Socket.Guard.Budget.Limit != mb {
		t.Errorf("equal budgets: %v, shared budget %+v", err, ok.Socket.Guard.Budget)
	}
	bad := Config{Handler: nopHandler, Logger: quiet, MemoryBudget: mb, Socket: socket.Options{MemoryBudget: 300 << 20}}
	want := "kvevents: Config.Socket.MemoryBudget 314572800 differs from Config.MemoryBudget 268435456"
	if err := bad.fill(); err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("different budgets: %v, want %q", err, want)
	}
	off := Config{Handler: nopHandler, Logger: quiet, MemoryBudget: mb, Socket: socket.Options{MemoryBudget: -1}}
	if err := off.fill(); err != nil || off.Socket.Guard.Budget != nil {
		t.Errorf("receive budget off: %v, shared budget %+v", err, off.Socket.Guard.Budget)
	}
}

// TestConfigSocketDefaultOptions: the config trap of issue 30 in this
// package. socket.DefaultOptions() with a raised MaxMessageSize works as
// Options{} with the same change does: both are raised to hold MaxPayload
// (the floor, logged since the value was the user's), and a value above the
// floor is kept.
func TestConfigSocketDefaultOptions(t *testing.T) {
	for _, base := range []struct {
		name string
		opts socket.Options
	}{{"DefaultOptions", socket.DefaultOptions()}, {"Options{}", socket.Options{}}} {
		for _, tc := range []struct {
			maxPayload int
			size, want int64
			logged     bool
		}{
			{0, 8 << 20, 64<<20 + 64<<10, true},
			{1 << 20, 8 << 20, 8 << 20, false},
		} {
			var logs bytes.Buffer
			o := base.opts
			o.Guard.MaxMessageSize = tc.size
			cfg := Config{Handler: nopHandler, Logger: slog.New(slog.NewTextHandler(&logs, nil)), MaxPayload: tc.maxPayload, Socket: o}
			s, err := NewSubscriber(cfg)
			if err != nil {
				t.Fatalf("%s, MaxMessageSize %d, MaxPayload %d: %v", base.name, tc.size, tc.maxPayload, err)
			}
			got := s.cfg.Socket.Guard.MaxMessageSize
			s.Close()
			if got != tc.want {
				t.Errorf("%s, MaxMessageSize %d, MaxPayload %d: socket message size %d, want %d", base.name, tc.size, tc.maxPayload, got, tc.want)
			}
			if raised := strings.Contains(logs.String(), "raised"); raised != tc.logged {
				t.Errorf("%s, MaxMessageSize %d: raise logged %v, want %v (%q)", base.name, tc.size, raised, tc.logged, logs.String())
			}
		}
	}
}

// TestPublisherConfig: PublisherConfig follows the same convention: zero
// fills the documented defaults, negative is an error naming the field,
// except the fields whose doc says negative turns them off.
func TestPublisherConfig(t *testing.T) {
	var c PublisherConfig
	if err := c.fill(); err != nil {
		t.Fatal(err)
	}
	if c.Endpoint != "tcp://*:5557" || c.BufferSteps != 10000 || c.QueueSize != 10000 || c.HWM != 100000 ||
		c.ReplayInterval != 100*time.Millisecond || c.ReplayFloodLimit != 16 || c.ReplaysPerHost != 10 {
		t.Fatalf("defaults %+v", c)
	}
	if c.Socket.Logger != c.Logger {
		t.Errorf("Socket.Logger %p is not the Publisher's Logger %p", c.Socket.Logger, c.Logger)
	}
	for _, f := range []struct {
		name string
		set  func(*PublisherConfig)
	}{
		{"BufferSteps", func(c *PublisherConfig) { c.BufferSteps = -1 }},
		{"QueueSize", func(c *PublisherConfig) { c.QueueSize = -1 }},
		{"HWM", func(c *PublisherConfig) { c.HWM = -1 }},
		{"DataParallelRank", func(c *PublisherConfig) { c.DataParallelRank = -1 }},
	} {
		c := PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Bind: true, Logger: quiet}
		f.set(&c)
		p, err := NewPublisher(c)
		if err == nil {
			p.Close()
			t.Errorf("%s -1 accepted", f.name)
			continue
		}
		if want := "kvevents: PublisherConfig." + f.name + " -1 "; !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s -1: error %q, want %q...", f.name, err, want)
		}
	}
	// Negative means off where the doc says so.
	p, err := NewPublisher(PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Bind: true, Logger: quiet,
		ReplayInterval: -1, ReplayFloodLimit: -1, ReplaysPerHost: -1})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
}

package coordinator

import (
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/socket"
)

// TestConfigDefaults: every zero field takes the default its doc states.
func TestConfigDefaults(t *testing.T) {
	c := Config{Engines: 3}.withDefaults()
	if c.StatsInterval != 100*time.Millisecond || c.IdleInterval != 5*time.Second ||
		c.ReadyInterval != 100*time.Millisecond || c.LogInterval != time.Second || c.Logger == nil {
		t.Fatalf("defaults: %+v", c)
	}
	for _, tc := range []struct{ engines, want int }{{1, 8}, {3, 12}, {1024, 4096}, {1025, 4096}, {5000, 4096}} {
		if got := (Config{Engines: tc.engines}).withDefaults().MaxEngines; got != tc.want {
			t.Errorf("Engines %d: MaxEngines %d, want %d", tc.engines, got, tc.want)
		}
	}
	// ReadyInterval's documented negative (off) survives the fill.
	if c := (Config{Engines: 1, ReadyInterval: -1}).withDefaults(); c.ReadyInterval != -1 {
		t.Fatalf("negative ReadyInterval became %v", c.ReadyInterval)
	}
}

// TestConfigNegativeNamed: a negative value where no doc gives it a
// meaning is refused by New with a one-line error naming the field and
// the value.
func TestConfigNegativeNamed(t *testing.T) {
	for name, tc := range map[string]struct {
		mod  func(*Config)
		want string
	}{
		"StatsInterval":   {func(c *Config) { c.StatsInterval = -time.Second }, "Config.StatsInterval -1s is negative"},
		"IdleInterval":    {func(c *Config) { c.IdleInterval = -time.Millisecond }, "Config.IdleInterval -1ms is negative"},
		"StartupDeadline": {func(c *Config) { c.StartupDeadline = -2 * time.Second }, "Config.StartupDeadline -2s is negative"},
		"LogInterval":     {func(c *Config) { c.LogInterval = -time.Second }, "Config.LogInterval -1s is negative"},
		"MaxMessageSize":  {func(c *Config) { c.MaxMessageSize = -5 }, "Config.MaxMessageSize -5 is negative"},
		"MaxEngines":      {func(c *Config) { c.MaxEngines = -1 }, "Config.MaxEngines -1 is not in [1, 65536]"},
		"Engines":         {func(c *Config) { c.Engines = -3 }, "Config.Engines -3 is not in [1, 8]"},
		"ScaleFrom":       {func(c *Config) { c.ScaleFrom = []string{"host"} }, `Config.ScaleFrom "host" is not an IP address`},
	} {
		cfg := testConfig(1)
		tc.mod(&cfg)
		c, err := New(cfg)
		if err == nil {
			c.Close()
			t.Errorf("%s: New succeeded", name)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
			t.Errorf("%s: error %q, want one line containing %q", name, msg, tc.want)
		}
	}
	// ReadyInterval's negative is documented (one READY per subscription).
	cfg := testConfig(1)
	cfg.ReadyInterval = -1
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("negative ReadyInterval: %v", err)
	}
	if c.readyInterval() != 0 {
		t.Errorf("negative ReadyInterval: coalescing %v, want none", c.readyInterval())
	}
	c.Close()
}

// TestConfigSocketOverride: MaxMessageSize reaches the sockets (and the
// engine-output decode) through sockopt.Apply where Socket leaves the
// field zero; an explicit Socket value wins; and raising the message size
// above a small explicit MemoryBudget is not refused (the trap of setting
// one limit without the other): Apply raises the budget with it.
func TestConfigSocketOverride(t *testing.T) {
	cfg := testConfig(1)
	cfg.Socket = socket.Options{}
	cfg.MaxMessageSize = 8 << 20
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if c.outLimits.MaxBytes != 8<<20 {
		t.Errorf("decode limit %d, want %d", c.outLimits.MaxBytes, 8<<20)
	}
	c.Close()

	cfg = testConfig(1)
	cfg.Socket = socket.Options{MemoryBudget: 4 << 20}
	cfg.MaxMessageSize = 8 << 20
	c, err = New(cfg)
	if err != nil {
		t.Fatalf("MaxMessageSize 8 MiB over a 4 MiB budget: %v", err)
	}
	c.Close()

	cfg = testConfig(1)
	cfg.Socket = socket.Options{}
	cfg.Socket.Guard.MaxMessageSize = 64 << 10
	cfg.MaxMessageSize = 8 << 20
	c, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if c.outLimits.MaxBytes != 64<<10 {
		t.Errorf("explicit socket limit: decode limit %d, want %d", c.outLimits.MaxBytes, 64<<10)
	}
	c.Close()
}

package outputs

import (
	"context"
	"strings"
	"testing"

	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/socket"
)

func nopHandler(context.Context, *enginecore.Message, *socket.Peer) error { return nil }

// TestConfigNegativeNamed: a negative number is refused by New with a
// one-line error naming the field and the value.
func TestConfigNegativeNamed(t *testing.T) {
	for name, tc := range map[string]struct {
		mod  func(*Config)
		want string
	}{
		"Handler":        {func(c *Config) { c.Handler = nil }, "Config.Handler is nil"},
		"Engines":        {func(c *Config) { c.Engines = -1 }, "Config.Engines -1 is negative"},
		"ConnQueueBytes": {func(c *Config) { c.ConnQueueBytes = -2 }, "Config.ConnQueueBytes -2 is negative"},
		"QueueBytes":     {func(c *Config) { c.QueueBytes = -3 }, "Config.QueueBytes -3 is negative"},
		"MaxFrames":      {func(c *Config) { c.Limits.MaxFrames = -4 }, "Config.Limits.MaxFrames -4 is negative"},
		"MaxBytes":       {func(c *Config) { c.Limits.Scan.MaxBytes = -5 }, "Config.Limits.Scan.MaxBytes -5 is negative"},
		"MaxElements":    {func(c *Config) { c.Limits.Scan.MaxElements = -6 }, "Config.Limits.Scan.MaxElements -6 is negative"},
		"QueueOrder":     {func(c *Config) { c.ConnQueueBytes, c.QueueBytes = 2<<20, 1<<20 }, "Config.QueueBytes 1048576 is below ConnQueueBytes 2097152"},
	} {
		cfg := Config{Logger: quiet, Handler: nopHandler}
		tc.mod(&cfg)
		r, err := New(cfg)
		if err == nil {
			r.Close()
			t.Errorf("%s: New succeeded", name)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
			t.Errorf("%s: error %q, want one line containing %q", name, msg, tc.want)
		}
	}
}

// TestConfigSocketOverride: the receiver's socket defaults (4096 frames,
// 64 MiB) apply through sockopt.Apply only where Socket leaves a field
// zero, an explicit value wins, and a small explicit MemoryBudget does not
// make the raised message size a refused configuration (the budget is
// raised to two messages with it).
func TestConfigSocketOverride(t *testing.T) {
	so := socket.Options{Logger: quiet}
	so.Guard.MaxFrames = 8192
	r, err := New(Config{Logger: quiet, Handler: nopHandler, Socket: so})
	if err != nil {
		t.Fatal(err)
	}
	if g := r.sock.Options().Guard; g.MaxFrames != 8192 || g.MaxMessageSize != defaultMaxMessageSize {
		t.Errorf("explicit MaxFrames: socket %d frames, %d bytes", g.MaxFrames, g.MaxMessageSize)
	}
	if r.lim.MaxFrames != 8192 {
		t.Errorf("decode frame limit %d, want the socket's 8192", r.lim.MaxFrames)
	}
	r.Close()

	r, err = New(Config{Logger: quiet, Handler: nopHandler, Socket: socket.Options{Logger: quiet, MemoryBudget: 8 << 20}})
	if err != nil {
		t.Fatalf("MemoryBudget 8 MiB under the 64 MiB default message size: %v", err)
	}
	if mb := r.sock.Options().MemoryBudget; mb < 2*defaultMaxMessageSize {
		t.Errorf("MemoryBudget %d, want at least two messages", mb)
	}
	r.Close()
}

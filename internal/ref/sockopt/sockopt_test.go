package sockopt

import (
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/zmqguard/zmqguard/socket"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestApply(t *testing.T) {
	lg := slog.New(slog.DiscardHandler)
	ov := Overrides{MaxMessageSize: 64 << 20, MaxFrames: 4096, MaxConns: 1, WriteBufferSize: 4 << 10, Logger: lg}

	// Zero fields take the reference's values.
	got, raised := Apply(socket.Options{}, ov)
	if g := got.Guard; g.MaxMessageSize != 64<<20 || g.MaxFrames != 4096 || g.MaxConns != 1 || g.WriteBufferSize != 4<<10 || got.Logger != lg || raised {
		t.Fatalf("zero options: got %+v, raised %v", g, raised)
	}

	// Explicit user values win.
	var o socket.Options
	o.Guard.MaxMessageSize, o.Guard.MaxFrames, o.Guard.MaxConns, o.Guard.WriteBufferSize = 1<<20, 8, 3, 1<<10
	mine := slog.New(slog.DiscardHandler)
	o.Logger = mine
	got, _ = Apply(o, ov)
	if g := got.Guard; g.MaxMessageSize != 1<<20 || g.MaxFrames != 8 || g.MaxConns != 3 || g.WriteBufferSize != 1<<10 || got.Logger != mine {
		t.Fatalf("explicit options: got %+v", g)
	}

	// A floor raises an explicit value, reports it, and keeps an explicit
	// memory budget able to hold two such messages.
	o = socket.Options{MemoryBudget: 2 << 20}
	o.Guard.MaxMessageSize = 1 << 20
	got, raised = Apply(o, Overrides{MinMessageSize: 8 << 20})
	if got.Guard.MaxMessageSize != 8<<20 || !raised || got.MemoryBudget != 16<<20 {
		t.Fatalf("floor: size %d raised %v budget %d", got.Guard.MaxMessageSize, raised, got.MemoryBudget)
	}
	// A floor over the socket default (field left zero) is not a raise of
	// the user's value.
	got, raised = Apply(socket.Options{}, Overrides{MinMessageSize: 8 << 20})
	if got.Guard.MaxMessageSize != 8<<20 || raised || got.MemoryBudget != 0 {
		t.Fatalf("floor over default: size %d raised %v budget %d", got.Guard.MaxMessageSize, raised, got.MemoryBudget)
	}
	// A negative memory budget (off, where socket documents it) stays off.
	got, _ = Apply(socket.Options{MemoryBudget: -1}, Overrides{MinMessageSize: 8 << 20})
	if got.MemoryBudget != -1 {
		t.Fatalf("budget off: got %d", got.MemoryBudget)
	}
}

func TestVerify(t *testing.T) {
	if err := Verify(socket.Options{}); err != nil {
		t.Fatalf("zero options: %v", err)
	}
	var o socket.Options
	o.Guard.MaxMessageSize = 128 << 20 // the default budget is derived: 256 MiB
	if err := Verify(o); err != nil {
		t.Fatalf("large messages, budget left zero: %v", err)
	}
	for _, c := range []struct {
		o    socket.Options
		want string
	}{
		{socket.Options{HWM: -1}, "socket: Options.HWM -1 is negative"},
		{socket.Options{MemoryBudget: 1 << 10}, "socket: Options.MemoryBudget 1024 is below Guard.MaxMessageSize 1048576"},
		{socket.Options{BudgetWait: -time.Second}, "socket: Options.BudgetWait -1s is negative"},
	} {
		err := Verify(c.o)
		if err == nil || err.Error() != c.want {
			t.Errorf("Verify(%+v) = %v, want %q", c.o, err, c.want)
		}
	}
}

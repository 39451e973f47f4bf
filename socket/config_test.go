package socket_test

import (
	"math"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// newOpts creates a socket of type typ with o, closes it, and returns the
// options it ran with (or New's error).
func newOpts(t *testing.T, typ zmtpguard.SocketType, o socket.Options) (socket.Options, error) {
	t.Helper()
	s, err := socket.New(typ, o)
	if err != nil {
		return socket.Options{}, err
	}
	defer s.Close()
	return s.Options(), nil
}

// TestConfigTrap is issue 30's configuration trap: starting from
// DefaultOptions and raising Guard.MaxMessageSize must configure the same
// socket as making the same change to Options{}. DefaultOptions used to
// pre-fill MemoryBudget from the default message size (64 MiB), so a
// MaxMessageSize above it was refused ("MemoryBudget ... is below
// Guard.MaxMessageSize") on that path only.
func TestConfigTrap(t *testing.T) {
	for _, size := range []int64{8 << 20, 128 << 20} {
		fromDefaults := socket.DefaultOptions()
		fromDefaults.Guard.MaxMessageSize = size
		var fromZero socket.Options
		fromZero.Guard.MaxMessageSize = size

		a, err := newOpts(t, "PULL", fromDefaults)
		if err != nil {
			t.Fatalf("DefaultOptions with MaxMessageSize %d refused: %v", size, err)
		}
		b, err := newOpts(t, "PULL", fromZero)
		if err != nil {
			t.Fatalf("Options{} with MaxMessageSize %d refused: %v", size, err)
		}
		want := max(int64(64<<20), 2*size)
		if a.MemoryBudget != want || b.MemoryBudget != want {
			t.Errorf("MaxMessageSize %d: MemoryBudget %d (from DefaultOptions) and %d (from Options{}), want %d",
				size, a.MemoryBudget, b.MemoryBudget, want)
		}
		a.Logger, b.Logger = nil, nil
		if !reflect.DeepEqual(a, b) {
			t.Errorf("MaxMessageSize %d: the two paths differ:\n%+v\n%+v", size, a, b)
		}
	}
	// DefaultOptions leaves the derived fields zero, as documented.
	if d := socket.DefaultOptions(); d.MemoryBudget != 0 || d.BudgetWait != 0 || d.WriteTimeout != 0 {
		t.Errorf("DefaultOptions filled a derived field: MemoryBudget %d, BudgetWait %v, WriteTimeout %v", d.MemoryBudget, d.BudgetWait, d.WriteTimeout)
	}
	// An explicit budget below the final MaxMessageSize is still refused,
	// by a one-line error naming the field and both values.
	var o socket.Options
	o.Guard.MaxMessageSize = 128 << 20
	o.MemoryBudget = 64 << 20
	_, err := newOpts(t, "PULL", o)
	if want := "socket: Options.MemoryBudget 67108864 is below Guard.MaxMessageSize 134217728"; err == nil || err.Error() != want {
		t.Errorf("explicit small budget: %v, want %q", err, want)
	}
}

// TestConfigFields checks every field of Options the same way: zero means
// the default its doc states; a negative value means "off" where the doc
// says so (the socket keeps it) and is refused elsewhere, by an error
// naming the field and the value; an explicit value is kept.
func TestConfigFields(t *testing.T) {
	const off = "off" // negNote: a negative value is kept, meaning off
	type fieldCase struct {
		name string
		typ  zmtpguard.SocketType
		get  func(socket.Options) any
		set  func(*socket.Options, float64) // sets the field to v (converted)
		def  any                            // the value zero means
		neg  string                         // off, or the text the error holds
		expl float64                        // an explicit positive value
	}
	dur := func(v float64) time.Duration { return time.Duration(v) }
	cases := []fieldCase{
		{"HWM", "", func(o socket.Options) any { return o.HWM }, func(o *socket.Options, v float64) { o.HWM = int(v) }, 1000, "Options.HWM -1 is negative", 10},
		{"ReconnectMin", "", func(o socket.Options) any { return o.ReconnectMin }, func(o *socket.Options, v float64) { o.ReconnectMin = dur(v) }, 100 * time.Millisecond, "Options.ReconnectMin -1ns is negative", float64(time.Second)},
		{"ReconnectMax", "", func(o socket.Options) any { return o.ReconnectMax }, func(o *socket.Options, v float64) { o.ReconnectMax = dur(v) }, 5 * time.Second, "Options.ReconnectMax -1ns is negative", float64(time.Minute)},
		{"ReconnectJitter", "", func(o socket.Options) any { return o.ReconnectJitter }, func(o *socket.Options, v float64) { o.ReconnectJitter = v }, 0.2, off, 0.5},
		{"HeartbeatInterval", "", func(o socket.Options) any { return o.HeartbeatInterval }, func(o *socket.Options, v float64) { o.HeartbeatInterval = dur(v) }, 2 * time.Second, off, float64(time.Second)},
		{"HeartbeatTimeout", "", func(o socket.Options) any { return o.HeartbeatTimeout }, func(o *socket.Options, v float64) { o.HeartbeatTimeout = dur(v) }, 6 * time.Second, "Options.HeartbeatTimeout -1ns is negative", float64(time.Second)},
		{"HeartbeatTTL", "", func(o socket.Options) any { return o.HeartbeatTTL }, func(o *socket.Options, v float64) { o.HeartbeatTTL = dur(v) }, time.Duration(0), "Options.HeartbeatTTL -1ns is outside 0..6553.5s", float64(time.Minute)},
		{"SendQueueBytes", "", func(o socket.Options) any { return o.SendQueueBytes }, func(o *socket.Options, v float64) { o.SendQueueBytes = int(v) }, 4 << 20, off, 1 << 10},
		{"SendTotalBytes", "", func(o socket.Options) any { return o.SendTotalBytes }, func(o *socket.Options, v float64) { o.SendTotalBytes = int64(v) }, int64(256 << 20), off, 1 << 20},
		{"RecvQueueBytes", "", func(o socket.Options) any { return o.RecvQueueBytes }, func(o *socket.Options, v float64) { o.RecvQueueBytes = int64(v) }, int64(64 << 20), off, 1 << 20},
		{"MemoryBudget", "", func(o socket.Options) any { return o.MemoryBudget }, func(o *socket.Options, v float64) { o.MemoryBudget = int64(v) }, int64(64 << 20), off, 8 << 20},
		{"BudgetWait", "", func(o socket.Options) any { return o.BudgetWait }, func(o *socket.Options, v float64) { o.BudgetWait = dur(v) }, 2 * time.Second, "Options.BudgetWait -1ns is negative", float64(time.Second)},
		{"XPubMaxTopics", "XPUB", func(o socket.Options) any { return o.XPubMaxTopics }, func(o *socket.Options, v float64) { o.XPubMaxTopics = int(v) }, 100_000, off, 10},
		{"XPubMaxTopicBytes", "XPUB", func(o socket.Options) any { return o.XPubMaxTopicBytes }, func(o *socket.Options, v float64) { o.XPubMaxTopicBytes = int64(v) }, int64(16 << 20), off, 1 << 10},
		{"ReclaimBytes", "", func(o socket.Options) any { return o.ReclaimBytes }, func(o *socket.Options, v float64) { o.ReclaimBytes = int64(v) }, int64(8 << 20), off, 1 << 20},
		{"WriteTimeout/XPUB", "XPUB", func(o socket.Options) any { return o.WriteTimeout }, func(o *socket.Options, v float64) { o.WriteTimeout = dur(v) }, 10 * time.Second, off, float64(time.Second)},
		{"WriteTimeout/DEALER", "", func(o socket.Options) any { return o.WriteTimeout }, func(o *socket.Options, v float64) { o.WriteTimeout = dur(v) }, time.Duration(0), off, float64(time.Second)},
		{"Guard.ReadBufferSize", "", func(o socket.Options) any { return o.Guard.ReadBufferSize }, func(o *socket.Options, v float64) { o.Guard.ReadBufferSize = int(v) }, 256 << 10, "ReadBufferSize", 64 << 10},
		{"Guard.WriteBufferSize", "", func(o socket.Options) any { return o.Guard.WriteBufferSize }, func(o *socket.Options, v float64) { o.Guard.WriteBufferSize = int(v) }, 64 << 10, "WriteBufferSize", 4 << 10},
		{"Guard.MaxMessageSize", "", func(o socket.Options) any { return o.Guard.MaxMessageSize }, func(o *socket.Options, v float64) { o.Guard.MaxMessageSize = int64(v) }, int64(1 << 20), "MaxMessageSize", 4 << 10},
		{"Guard.MaxFrames", "", func(o socket.Options) any { return o.Guard.MaxFrames }, func(o *socket.Options, v float64) { o.Guard.MaxFrames = int(v) }, 64, "MaxFrames", 8},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			typ := c.typ
			if typ == "" {
				typ = "DEALER"
			}
			// Zero: the documented default.
			got, err := newOpts(t, typ, socket.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if v := c.get(got); v != c.def {
				t.Errorf("zero gave %v (%T), want %v (%T)", v, v, c.def, c.def)
			}
			// DefaultOptions gives the same default.
			got, err = newOpts(t, typ, socket.DefaultOptions())
			if err != nil {
				t.Fatal(err)
			}
			if v := c.get(got); v != c.def {
				t.Errorf("DefaultOptions gave %v, want %v", v, c.def)
			}
			// Negative: off where documented, else refused naming the field.
			var o socket.Options
			c.set(&o, -1)
			got, err = newOpts(t, typ, o)
			switch {
			case c.neg == off && err != nil:
				t.Errorf("negative (off) refused: %v", err)
			case c.neg == off:
				var want socket.Options
				c.set(&want, -1)
				if v, w := c.get(got), c.get(want); v != w {
					t.Errorf("negative (off) became %v, want it kept (%v)", v, w)
				}
			case err == nil:
				t.Errorf("negative accepted: %v", c.get(got))
			case !strings.Contains(err.Error(), c.neg) || !strings.Contains(err.Error(), "-1") || strings.Contains(err.Error(), "\n"):
				t.Errorf("negative: error %q, want one line holding %q and the value", err, c.neg)
			}
			// Explicit: kept.
			o = socket.Options{}
			c.set(&o, c.expl)
			if c.name == "HeartbeatTTL" {
				o.HeartbeatInterval = time.Second
			}
			got, err = newOpts(t, typ, o)
			if err != nil {
				t.Fatalf("explicit %v refused: %v", c.expl, err)
			}
			var want socket.Options
			c.set(&want, c.expl)
			if v, w := c.get(got), c.get(want); v != w {
				t.Errorf("explicit became %v, want %v", v, w)
			}
		})
	}
}

// TestConfigOtherFields covers the fields the table cannot: limits above
// range, NaN, the derived ones, TCPKeepAlive and Identity.
func TestConfigOtherFields(t *testing.T) {
	refused := []struct {
		o    socket.Options
		want string
	}{
		{socket.Options{HWM: 1<<24 + 1}, "socket: Options.HWM 16777217 is over 16M messages"},
		{socket.Options{ReconnectJitter: 1.5}, "socket: Options.ReconnectJitter 1.5 is over 1"},
		{socket.Options{ReconnectJitter: math.NaN()}, "socket: Options.ReconnectJitter NaN is over 1"},
		{socket.Options{HeartbeatInterval: time.Microsecond}, "socket: Options.HeartbeatInterval 1µs is under 1ms"},
		{socket.Options{HeartbeatTTL: time.Second}, "socket: Options.HeartbeatTTL 1s must exceed HeartbeatInterval 2s"},
		{socket.Options{Identity: make([]byte, 256)}, "socket: Options.Identity of 256 bytes is over 255 bytes"},
		{socket.Options{TCPKeepAlive: net.KeepAliveConfig{Enable: true, Idle: -2}}, "socket: Options.TCPKeepAlive"},
	}
	for _, c := range refused {
		_, err := newOpts(t, "DEALER", c.o)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.o, err, c.want)
		}
	}
	// Two errors at once: both named, on one line.
	_, err := newOpts(t, "DEALER", socket.Options{HWM: -1, BudgetWait: -1})
	if err == nil || !strings.Contains(err.Error(), "HWM -1") || !strings.Contains(err.Error(), "BudgetWait -1ns") || strings.Contains(err.Error(), "\n") {
		t.Errorf("two bad fields: %q", err)
	}

	// TCPKeepAlive: zero is the default; Enable false with a field set is
	// off; an explicit config is kept.
	got, err := newOpts(t, "DEALER", socket.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if want := (net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 15 * time.Second, Count: 9}); got.TCPKeepAlive != want {
		t.Errorf("TCPKeepAlive default %+v, want %+v", got.TCPKeepAlive, want)
	}
	for _, ka := range []net.KeepAliveConfig{{Idle: -1}, {Enable: true, Idle: time.Minute, Interval: -1, Count: 3}} {
		got, err := newOpts(t, "DEALER", socket.Options{TCPKeepAlive: ka})
		if err != nil || got.TCPKeepAlive != ka {
			t.Errorf("TCPKeepAlive %+v became %+v, %v", ka, got.TCPKeepAlive, err)
		}
	}

	// ReconnectMax below ReconnectMin is raised to it; the derived
	// MemoryBudget follows the final MaxMessageSize.
	got, err = newOpts(t, "DEALER", socket.Options{ReconnectMin: 10 * time.Second})
	if err != nil || got.ReconnectMax != 10*time.Second {
		t.Errorf("ReconnectMin 10s: ReconnectMax %v, %v", got.ReconnectMax, err)
	}
	var o socket.Options
	o.Guard.MaxMessageSize = 100 << 20
	if got, err := newOpts(t, "DEALER", o); err != nil || got.MemoryBudget != 200<<20 {
		t.Errorf("MaxMessageSize 100 MiB: MemoryBudget %d, %v", got.MemoryBudget, err)
	}

	// Unsupported socket types are refused by name.
	if _, err := socket.New("PUB", socket.Options{}); err == nil || !strings.Contains(err.Error(), `"PUB"`) {
		t.Errorf("PUB: %v", err)
	}
}

// TestSharedBudgetOneKnob (issue 40): MemoryBudget sizes a socket's
// budget; Guard.Budget only shares one budget between sockets. With
// Guard.Budget set, MemoryBudget and BudgetWait left zero report its Limit
// and Wait, equal values are accepted, and any other value (a negative
// MemoryBudget included) is refused by one line naming both values,
// instead of Guard.Budget winning silently.
func TestSharedBudgetOneKnob(t *testing.T) {
	shared := &zmtpguard.Budget{Limit: 16 << 20, Wait: 5 * time.Second}
	var o socket.Options
	o.Guard.Budget = shared
	got, err := newOpts(t, "PULL", o)
	if err != nil {
		t.Fatal(err)
	}
	if got.MemoryBudget != 16<<20 || got.BudgetWait != 5*time.Second || got.Guard.Budget != shared {
		t.Errorf("shared budget: MemoryBudget %d, BudgetWait %v, Guard.Budget %p; want 16 MiB, 5s, %p",
			got.MemoryBudget, got.BudgetWait, got.Guard.Budget, shared)
	}
	// Options() fed back (equal values) is accepted, from DefaultOptions too.
	if _, err := newOpts(t, "PULL", got); err != nil {
		t.Errorf("the socket's own Options refused: %v", err)
	}
	d := socket.DefaultOptions()
	d.Guard.Budget = shared
	if _, err := newOpts(t, "PULL", d); err != nil {
		t.Errorf("DefaultOptions with a shared budget refused: %v", err)
	}
	for _, c := range []struct {
		name string
		set  func(*socket.Options)
		want string
	}{
		{"MemoryBudget", func(o *socket.Options) { o.MemoryBudget = 8 << 20 },
			"socket: Options.MemoryBudget 8388608 differs from Guard.Budget.Limit 16777216"},
		{"MemoryBudget off", func(o *socket.Options) { o.MemoryBudget = -1 },
			"socket: Options.MemoryBudget -1 differs from Guard.Budget.Limit 16777216"},
		{"BudgetWait", func(o *socket.Options) { o.BudgetWait = time.Second },
			"socket: Options.BudgetWait 1s differs from Guard.Budget.Wait 5s"},
	} {
		o := socket.Options{}
		o.Guard.Budget = shared
		c.set(&o)
		_, err := newOpts(t, "PULL", o)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line holding %q", c.name, err, c.want)
		}
	}
	// A shared budget's zero Wait is zmtpguard's default, 2 s.
	o = socket.Options{}
	o.Guard.Budget = &zmtpguard.Budget{Limit: 16 << 20}
	if got, err := newOpts(t, "PULL", o); err != nil || got.BudgetWait != 2*time.Second {
		t.Errorf("shared budget without Wait: BudgetWait %v, %v", got.BudgetWait, err)
	}
}

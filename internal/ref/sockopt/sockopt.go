// Package sockopt is the one place where a reference (kvevents, outputs,
// coordinator, handshake) turns the socket.Options its user passed into the
// options its socket runs with. A reference has its own defaults for a few
// socket fields (an engine output socket needs 4096 frames, a KV subscriber
// a message size above its payload limit); each applies only where the user
// left the field zero, so an explicit user value always wins, except a
// floor the reference cannot work under, which Apply raises and reports.
// The socket fills its own defaults for everything else when it is created.
// Verify checks a user's options as socket.New will, for a reference that
// refuses a bad configuration before it creates any socket.
package sockopt

import (
	"log/slog"

	"github.com/zmqguard/zmqguard/socket"
)

// Overrides are one reference's defaults for socket.Options. A zero field
// changes nothing.
type Overrides struct {
	// MaxMessageSize, MaxFrames, MaxConns and WriteBufferSize replace
	// the socket's defaults for the Guard fields of the same names when
	// the user's Options leave them zero.
	MaxMessageSize  int64
	MaxFrames       int
	MaxConns        int
	WriteBufferSize int
	// MinMessageSize is the smallest Guard.MaxMessageSize the reference
	// works with: a smaller value (the user's or the socket default) is
	// raised to it. Zero means no floor.
	MinMessageSize int64
	// Logger is the Options' Logger when the user set none.
	Logger *slog.Logger
}

// Apply returns o with ov applied. When it raises Guard.MaxMessageSize and
// o has an explicit MemoryBudget under two messages of that size, the
// budget is raised to two messages too, so that the raise is not refused by
// the socket's verification. raised reports whether MinMessageSize raised a
// value the user set.
func Apply(o socket.Options, ov Overrides) (out socket.Options, raised bool) {
	if o.Guard.MaxMessageSize == 0 && ov.MaxMessageSize > 0 {
		o.Guard.MaxMessageSize = ov.MaxMessageSize
	}
	if o.Guard.MaxFrames == 0 && ov.MaxFrames > 0 {
		o.Guard.MaxFrames = ov.MaxFrames
	}
	if o.Guard.MaxConns == 0 && ov.MaxConns > 0 {
		o.Guard.MaxConns = ov.MaxConns
	}
	if o.Guard.WriteBufferSize == 0 && ov.WriteBufferSize > 0 {
		o.Guard.WriteBufferSize = ov.WriteBufferSize
	}
	if ov.MinMessageSize > 0 && o.Guard.MaxMessageSize < ov.MinMessageSize {
		raised = o.Guard.MaxMessageSize != 0
		o.Guard.MaxMessageSize = ov.MinMessageSize
	}
	if mm := o.Guard.MaxMessageSize; o.MemoryBudget > 0 && o.MemoryBudget < 2*mm {
		o.MemoryBudget = 2 * mm
	}
	if o.Logger == nil {
		o.Logger = ov.Logger
	}
	return o, raised
}

// Verify reports whether socket.New accepts o, for a reference that checks
// its user's options when it is configured, before it creates a socket. It
// creates a socket with o that never binds or dials and closes it at once
// (no goroutine, listener or descriptor outlives the call), so the error is
// exactly socket.New's: "socket: Options.Field <value> <what is wrong>".
func Verify(o socket.Options) error {
	s, err := socket.New("DEALER", o)
	if err != nil {
		return err
	}
	return s.Close()
}

package zmtpguard

import (
	"context"
	"net"
)

// Listen (a test helper: users call net.Listen and NewListener) announces on the local network address (network "tcp", "tcp4",
// "tcp6" or "unix") and returns a guarded Listener for a local socket of type
// local, under cfg's limits (nil means defaults). ctx bounds the listen call
// only; the Listener runs until Close.
func Listen(ctx context.Context, network, addr string, local SocketType, cfg *Config) (*Listener, error) {
	if err := checkListenArgs(local, cfg); err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return NewListener(ln, local, cfg)
}

// Addr returns the listener's network address (tests).
func (l *Listener) Addr() net.Addr { return l.loop.ln.Addr() }

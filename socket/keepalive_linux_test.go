//go:build linux

package socket

import (
	"net"
	"syscall"
	"testing"
	"time"
)

// sockopt reads an integer socket option of a TCP connection.
func sockopt(t *testing.T, c net.Conn, level, opt int) int {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) { v, gerr = syscall.GetsockoptInt(int(fd), level, opt) }); err != nil {
		t.Fatal(err)
	}
	if gerr != nil {
		t.Fatal(gerr)
	}
	return v
}

// TCP keepalive is set as configured on accepted and dialed connections,
// and can be turned off.
func TestTCPKeepAliveApplied(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	ka := func(o *Options) {
		o.TCPKeepAlive = net.KeepAliveConfig{Enable: true, Idle: 7 * time.Second, Interval: 3 * time.Second, Count: 4}
	}
	r := mustSocket(t, NewRouter, ka)
	ep := mustBind(t, r)
	d := mustSocket(t, NewDealer, ka)
	mustDial(t, d, ep)
	off := mustSocket(t, NewDealer, func(o *Options) { o.TCPKeepAlive = net.KeepAliveConfig{Idle: -1} })
	mustDial(t, off, ep)
	waitPeers(t, ctx, r, 2)
	waitPeers(t, ctx, d, 1)
	waitPeers(t, ctx, off, 1)
	for name, s := range map[string]*Socket{"accepted": r, "dialed": d} {
		for _, p := range *s.snap.Load() {
			nc := p.conn.NetConn()
			if s == r && p.info.addrText == (*off.snap.Load())[0].conn.NetConn().LocalAddr().String() {
				continue // the keepalive-off dialer's connection, accepted with the listener's settings
			}
			got := [4]int{
				sockopt(t, nc, syscall.SOL_SOCKET, syscall.SO_KEEPALIVE),
				sockopt(t, nc, syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE),
				sockopt(t, nc, syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL),
				sockopt(t, nc, syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT),
			}
			if got != [4]int{1, 7, 3, 4} {
				t.Errorf("%s connection: keepalive on/idle/interval/count = %v, want [1 7 3 4]", name, got)
			}
		}
	}
	if v := sockopt(t, (*off.snap.Load())[0].conn.NetConn(), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE); v != 0 {
		t.Errorf("keepalive turned off, yet SO_KEEPALIVE = %d", v)
	}
	// Defaults: on, 15 s idle.
	def := DefaultOptions().TCPKeepAlive
	if !def.Enable || def.Idle != 15*time.Second {
		t.Fatalf("default keepalive %+v", def)
	}
}

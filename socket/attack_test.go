package socket

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/zmtpwire"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// attack is one hostile-peer case: it attacks addr (host:port) of a socket
// whose compatible peer type is peerType, and returns the connections to
// keep open during the round trip that follows.
type attack struct {
	name string
	run  func(t *testing.T, ctx context.Context, addr string, peerType zmq4.SocketType) []net.Conn
}

func dialRaw(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	return nc
}

// sendRaw opens a connection, writes each chunk (ignoring errors: the socket
// may close it at the first bad byte) and keeps it open.
func sendRaw(t *testing.T, addr string, chunks ...[]byte) []net.Conn {
	nc := dialRaw(t, addr)
	for _, c := range chunks {
		nc.SetWriteDeadline(time.Now().Add(2 * time.Second))
		if _, err := nc.Write(c); err != nil {
			break
		}
	}
	return []net.Conn{nc}
}

func greeting() []byte {
	g := zmtpwire.LocalGreeting()
	return g[:]
}

func greetingWithMechanism(mech string) []byte {
	g := greeting()
	clear(g[12:32])
	copy(g[12:32], mech)
	return g
}

// command encodes a ZMTP command frame.
func command(name string, body []byte) []byte {
	data := append([]byte{byte(len(name))}, name...)
	data = append(data, body...)
	return frame(zmtpwire.FlagCommand, data)
}

func frame(flags byte, body []byte) []byte {
	if len(body) > 255 {
		h := make([]byte, 9)
		h[0] = flags | zmtpwire.FlagLong
		binary.BigEndian.PutUint64(h[1:], uint64(len(body)))
		return append(h, body...)
	}
	return append([]byte{flags, byte(len(body))}, body...)
}

func prop(name string, value []byte) []byte {
	b := append([]byte{byte(len(name))}, name...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(value)))
	return append(b, value...)
}

func longHeader(flags byte, size uint64) []byte {
	h := make([]byte, 9)
	h[0] = flags | zmtpwire.FlagLong
	binary.BigEndian.PutUint64(h[1:], size)
	return h
}

// handshaken completes a real guarded handshake as peerType and then writes
// raw bytes.
func handshaken(t *testing.T, ctx context.Context, addr string, peerType zmq4.SocketType, raw ...[]byte) []net.Conn {
	nc := dialRaw(t, addr)
	c, err := zmtpguard.Handshake(ctx, nc, zmtpguard.SocketType(peerType), nil, nil)
	if err != nil {
		t.Fatalf("attack handshake: %v", err)
	}
	for _, r := range raw {
		c.NetConn().SetWriteDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.NetConn().Write(r); err != nil {
			break
		}
	}
	return []net.Conn{c.NetConn()}
}

var hugeSizes = []uint64{1 << 31, 1 << 40, 1 << 62, 1<<64 - 1}

func attacks() []attack {
	var as []attack
	as = append(as,
		attack{"idle-conns", func(t *testing.T, _ context.Context, addr string, _ zmq4.SocketType) []net.Conn {
			var cs []net.Conn
			for i := 0; i < 20; i++ {
				cs = append(cs, dialRaw(t, addr))
			}
			return cs
		}},
		attack{"half-greeting", func(t *testing.T, _ context.Context, addr string, _ zmq4.SocketType) []net.Conn {
			var cs []net.Conn
			for i := 0; i < 20; i++ {
				cs = append(cs, sendRaw(t, addr, greeting()[:10])...)
			}
			return cs
		}},
		attack{"greeting-only", func(t *testing.T, _ context.Context, addr string, _ zmq4.SocketType) []net.Conn {
			return sendRaw(t, addr, greeting())
		}},
		attack{"http", func(t *testing.T, _ context.Context, addr string, _ zmq4.SocketType) []net.Conn {
			return sendRaw(t, addr, []byte("GET / HTTP/1.1\r\nHost: localhost\r\nUser-Agent: x\r\n\r\n"))
		}},
		attack{"tls-client-hello", func(t *testing.T, _ context.Context, addr string, _ zmq4.SocketType) []net.Conn {
			hello := []byte{0x16, 0x03, 0x01, 0x00, 0xa5, 0x01, 0x00, 0x00, 0xa1, 0x03, 0x03}
			rnd := make([]byte, 160)
			rand.Read(rnd)
			return sendRaw(t, addr, append(hello, rnd...))
		}},
		attack{"random-1MiB", func(t *testing.T, _ context.Context, addr string, _ zmq4.SocketType) []net.Conn {
			rnd := make([]byte, 1<<20)
			rand.Read(rnd)
			return sendRaw(t, addr, rnd)
		}},
		attack{"connect-close-burst", func(t *testing.T, _ context.Context, addr string, _ zmq4.SocketType) []net.Conn {
			for i := 0; i < 300; i++ {
				dialRaw(t, addr).Close()
			}
			return nil
		}},
	)
	for _, size := range hugeSizes {
		as = append(as,
			attack{"before-ready-command-claims-" + formatUint(size), func(t *testing.T, _ context.Context, addr string, _ zmq4.SocketType) []net.Conn {
				return sendRaw(t, addr, greeting(), longHeader(zmtpwire.FlagCommand, size))
			}},
			attack{"before-ready-data-claims-" + formatUint(size), func(t *testing.T, _ context.Context, addr string, _ zmq4.SocketType) []net.Conn {
				return sendRaw(t, addr, greeting(), longHeader(0, size))
			}},
			attack{"after-ready-data-claims-" + formatUint(size), func(t *testing.T, ctx context.Context, addr string, pt zmq4.SocketType) []net.Conn {
				return handshaken(t, ctx, addr, pt, longHeader(0, size))
			}},
			attack{"after-ready-more-claims-" + formatUint(size), func(t *testing.T, ctx context.Context, addr string, pt zmq4.SocketType) []net.Conn {
				return handshaken(t, ctx, addr, pt, frame(zmtpwire.FlagMore, []byte("x")), longHeader(0, size))
			}},
			attack{"after-ready-command-claims-" + formatUint(size), func(t *testing.T, ctx context.Context, addr string, pt zmq4.SocketType) []net.Conn {
				return handshaken(t, ctx, addr, pt, longHeader(zmtpwire.FlagCommand, size))
			}},
		)
	}
	ready := func(props ...[]byte) []byte {
		return command("READY", bytes.Join(props, nil))
	}
	badReady := map[string]func(pt zmq4.SocketType) []byte{
		"ready-truncated-property": func(pt zmq4.SocketType) []byte {
			return ready(append([]byte{11}, "Socket-Type\x00\x00"...))
		},
		"ready-name-length-is-frame-length": func(pt zmq4.SocketType) []byte {
			body := append([]byte{5}, "READY"...)
			body = append(body, byte(len(body)+30))
			body = append(body, bytes.Repeat([]byte("a"), 29)...)
			return frame(zmtpwire.FlagCommand, body)
		},
		"ready-value-length-huge": func(pt zmq4.SocketType) []byte {
			b := append([]byte{11}, "Socket-Type"...)
			b = append(b, 0xff, 0xff, 0xff, 0xff, 'P')
			return ready(b)
		},
		"ready-no-socket-type":      func(pt zmq4.SocketType) []byte { return ready(prop("Identity", nil)) },
		"ready-unknown-socket-type": func(pt zmq4.SocketType) []byte { return ready(prop("Socket-Type", []byte("BOGUS"))) },
		"ready-incompatible-type":   func(pt zmq4.SocketType) []byte { return ready(prop("Socket-Type", []byte("PAIR"))) },
		"ready-identity-300-bytes": func(pt zmq4.SocketType) []byte {
			return ready(prop("Socket-Type", []byte(pt)), prop("Identity", bytes.Repeat([]byte("i"), 300)))
		},
		"ready-duplicate-property": func(pt zmq4.SocketType) []byte {
			return ready(prop("Socket-Type", []byte(pt)), prop("socket-type", []byte(pt)))
		},
		"not-ready-but-data": func(pt zmq4.SocketType) []byte { return frame(0, []byte("hello")) },
		"error-command":      func(pt zmq4.SocketType) []byte { return command("ERROR", []byte{3, 'b', 'a', 'd'}) },
	}
	for name, f := range badReady {
		as = append(as, attack{name, func(t *testing.T, _ context.Context, addr string, pt zmq4.SocketType) []net.Conn {
			return sendRaw(t, addr, greeting(), f(pt))
		}})
	}
	for _, mech := range []string{"PLAIN", "CURVE", "GSSAPI", "\x01\x02garbage"} {
		as = append(as, attack{"mechanism-" + strings.Trim(mech, "\x01\x02"), func(t *testing.T, _ context.Context, addr string, _ zmq4.SocketType) []net.Conn {
			return sendRaw(t, addr, greetingWithMechanism(mech))
		}})
	}
	as = append(as,
		attack{"zmtp-1.0-greeting", func(t *testing.T, _ context.Context, addr string, _ zmq4.SocketType) []net.Conn {
			return sendRaw(t, addr, []byte{0x01, 0x00})
		}},
		attack{"zmtp-2.0-greeting", func(t *testing.T, _ context.Context, addr string, _ zmq4.SocketType) []net.Conn {
			return sendRaw(t, addr, []byte{0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 0x01, 0x05, 0x00, 0x00})
		}},
		attack{"ping-after-ready", func(t *testing.T, ctx context.Context, addr string, pt zmq4.SocketType) []net.Conn {
			cs := handshaken(t, ctx, addr, pt, command("PING", []byte{0, 1, 'x'}))
			// The socket answers with PONG and keeps the connection.
			var m zmtpguard.Message
			nc := cs[0]
			nc.SetReadDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 64)
			n, err := nc.Read(buf)
			if err != nil || !bytes.Contains(buf[:n], []byte("PONG")) {
				t.Errorf("no PONG: %q %v", buf[:n], err)
			}
			_ = m
			return cs
		}},
		attack{"10000-frame-message", func(t *testing.T, ctx context.Context, addr string, pt zmq4.SocketType) []net.Conn {
			msg := bytes.Repeat([]byte{zmtpwire.FlagMore, 0}, 9999)
			msg = append(msg, 0, 0)
			return handshaken(t, ctx, addr, pt, msg)
		}},
		attack{"subscribe-flood", func(t *testing.T, ctx context.Context, addr string, pt zmq4.SocketType) []net.Conn {
			var b []byte
			for i := 0; i < 2000; i++ {
				b = append(b, frame(0, []byte("\x01topic-"+formatUint(uint64(i))))...)
			}
			return handshaken(t, ctx, addr, pt, b)
		}},
	)
	return as
}

func formatUint(u uint64) string {
	var buf [20]byte
	i := len(buf)
	for {
		i--
		buf[i] = byte('0' + u%10)
		u /= 10
		if u == 0 {
			return string(buf[i:])
		}
	}
}

// target is one socket type under attack, with a real peer's round trip.
type target struct {
	name      string
	ctor      func(Options) (*Socket, error)
	peerType  zmq4.SocketType
	roundTrip func(t *testing.T, ctx context.Context, s *Socket, ep string)
}

func targets() []target {
	return []target{
		{"ROUTER", NewRouter, zmq4.Dealer, func(t *testing.T, ctx context.Context, s *Socket, ep string) {
			d := mustSocket(t, NewDealer)
			defer d.Close()
			mustDial(t, d, ep)
			if err := d.Send(ctx, []byte("rt")); err != nil {
				t.Fatal(err)
			}
			m := recvFrom(t, ctx, s, "rt")
			if len(m.Frames) != 2 {
				t.Fatalf("router got %q", m.Frames)
			}
			if err := s.Send(ctx, m.Frames[0], []byte("ok")); err != nil {
				t.Fatal(err)
			}
			if got := recvString(t, ctx, d); !eq(got, "ok") {
				t.Fatalf("dealer got %q", got)
			}
		}},
		{"PULL", NewPull, zmq4.Push, func(t *testing.T, ctx context.Context, s *Socket, ep string) {
			p := mustSocket(t, NewPush)
			defer p.Close()
			mustDial(t, p, ep)
			if err := p.Send(ctx, []byte("rt")); err != nil {
				t.Fatal(err)
			}
			if m := recvFrom(t, ctx, s, "rt"); len(m.Frames) != 1 {
				t.Fatalf("pull got %q", m.Frames)
			}
		}},
		{"XPUB", NewXPub, zmq4.XSub, func(t *testing.T, ctx context.Context, s *Socket, ep string) {
			sub := mustSocket(t, NewSub)
			defer sub.Close()
			sub.Subscribe([]byte("rt"))
			mustDial(t, sub, ep)
			for {
				got := recvString(t, ctx, s)
				if eq(got, "\x01rt") {
					break
				}
				if !eq(got, "\x00rt") && !strings.HasPrefix(got[0], "\x01topic-") && !strings.HasPrefix(got[0], "\x00topic-") {
					t.Fatalf("xpub got %q", got)
				}
			}
			if err := s.Send(ctx, []byte("rt-data")); err != nil {
				t.Fatal(err)
			}
			if got := recvString(t, ctx, sub); !eq(got, "rt-data") {
				t.Fatalf("sub got %q", got)
			}
		}},
	}
}

// recvFrom receives until a message whose last frame is want, skipping
// (a bounded number of) valid messages hostile peers sent.
func recvFrom(t *testing.T, ctx context.Context, s *Socket, want string) Msg {
	t.Helper()
	for i := 0; i < 10000; i++ {
		m, err := s.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Frames) > 0 && string(m.Frames[len(m.Frames)-1]) == want {
			return m
		}
	}
	t.Fatalf("no %q among 10000 messages", want)
	return Msg{}
}

func countFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func TestHostilePeers(t *testing.T) {
	for _, tg := range targets() {
		t.Run(tg.name, func(t *testing.T) {
			ctx := testCtx(t, 60*time.Second)
			s := mustSocket(t, tg.ctor, func(o *Options) { o.Guard.HandshakeTimeout = 2 * time.Second })
			ep := mustBind(t, s)
			addr := strings.TrimPrefix(ep, "tcp://")
			tg.roundTrip(t, ctx, s, ep)
			waitPeers(t, ctx, s, 0)
			baseG, baseFD, baseHeap := runtime.NumGoroutine(), countFDs(), heapAlloc()

			for _, a := range attacks() {
				conns := a.run(t, ctx, addr, tg.peerType)
				tg.roundTrip(t, ctx, s, ep)
				if t.Failed() {
					t.Fatalf("after attack %s", a.name)
				}
				for _, c := range conns {
					c.Close()
				}
			}
			st := s.Stats()
			var total uint64
			for _, v := range st.Refused {
				total += v
			}
			if total < 40 {
				t.Errorf("only %d violations counted: %v", total, st.Refused)
			}
			if st.Refused[decodeguard.ReasonOversize] < uint64(3*len(hugeSizes)) {
				t.Errorf("oversize violations %d", st.Refused[decodeguard.ReasonOversize])
			}
			// Readers of departed peers wait for Recv to take their last
			// batches (back pressure): drain them.
			poll.WaitForCtx(t, ctx, "departed peers drained", func() bool {
				c, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
				defer cancel()
				s.Recv(c)
				return s.Stats().Peers == 0
			})
			poll.WaitForCtx(t, ctx, "goroutines and fds back to baseline", func() bool {
				return runtime.NumGoroutine() <= baseG+2 && countFDs() <= baseFD+2
			})
			if h := heapAlloc(); h > baseHeap+16<<20 {
				t.Errorf("heap grew from %d to %d bytes", baseHeap, h)
			}
			t.Logf("violations %v; goroutines %d (base %d), fds %d (base %d)", st.Refused,
				runtime.NumGoroutine(), baseG, countFDs(), baseFD)
		})
	}
}

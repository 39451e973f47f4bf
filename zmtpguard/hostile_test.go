package zmtpguard

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
)

// attack is one hostile peer behaviour, run over raw TCP connections.
type attack struct {
	name  string
	conns int                  // connections to open (0 means 1)
	send  func(net.Conn)       // the hostile bytes (write errors are expected: the guard may close first)
	hold  bool                 // keep the connections open during the real peer's round trip
	close bool                 // the guard must close the connection at once
	pong  bool                 // the guard must answer a PING with a PONG echoing "ctx"
	want  decodeguard.Reason   // each connection ends in exactly one violation of this reason (None: no violation)
	mixed []decodeguard.Reason // instead of want: one violation per connection, each of one of these reasons
}

func writeAll(b []byte) func(net.Conn) { return func(c net.Conn) { c.Write(b) } }

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// tlsClientHello is the start of a TLS 1.2/1.3 ClientHello record.
var tlsClientHello = func() []byte {
	b := []byte{0x16, 0x03, 0x01, 0x00, 0xf1, 0x01, 0x00, 0x00, 0xed, 0x03, 0x03}
	b = append(b, make([]byte, 32)...) // client random
	b = append(b, 0x20)
	b = append(b, make([]byte, 32)...) // session id
	b = append(b, 0x00, 0x08, 0x13, 0x01, 0x13, 0x02, 0x13, 0x03, 0xc0, 0x2f, 0x01, 0x00)
	b = append(b, 0x00, 0xa0)
	return append(b, make([]byte, 0xa0)...)
}()

const httpRequest = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n\r\n"

func hostileAttacks() []attack {
	H, T, O := decodeguard.ReasonHandshake, decodeguard.ReasonTransport, decodeguard.ReasonOversize
	null := greetingWith(3, 0, "NULL")
	hs := handshakeAs("PUSH")

	random := make([]byte, 1<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i+8 <= len(random); i += 8 {
		binary.LittleEndian.PutUint64(random[i:], rng.Uint64())
	}
	randomReason := decodeguard.ReasonOf(checkGreeting(random, nil))

	st := prop("Socket-Type", "PUSH")
	truncated := st[:len(st)-2]
	nameEqFrame := append([]byte(nil), st...)
	nameEqFrame[0] = byte(1 + len(cmdReady) + len(nameEqFrame)) // the whole READY body
	near4G := []byte{11}
	near4G = append(near4G, "Socket-Type"...)
	near4G = binary.BigEndian.AppendUint32(near4G, 0xFFFFFFF0)
	near4G = append(near4G, "PUSH"...)

	tenThousand := []byte(nil)
	tenThousand = append(tenThousand, hs...)
	for i := range 10000 {
		tenThousand = append(tenThousand, dataFrame(i < 9999, []byte{'x'})...)
	}

	list := []attack{
		{name: "idle-50-held", conns: 50, hold: true, want: H},
		{name: "half-greeting-held", send: writeAll(null[:20]), hold: true, want: H},
		{name: "http-request", send: writeAll([]byte(httpRequest)), close: true, want: T},
		{name: "tls-client-hello", send: writeAll(tlsClientHello), close: true, want: T},
		{name: "random-1MiB", send: writeAll(random), close: true, want: randomReason},
		{name: "connect-close-burst-1000", conns: 1000, mixed: []decodeguard.Reason{H, decodeguard.ReasonPolicy}},
	}
	for _, size := range []struct {
		name string
		n    uint64
	}{{"2^31", 1 << 31}, {"2^40", 1 << 40}, {"2^62", 1 << 62}, {"2^64-1", 1<<64 - 1}} {
		list = append(list,
			attack{name: "ready-header-claims-" + size.name, send: writeAll(cat(null, longHeader(flagCommand, size.n))), close: true, want: H},
			attack{name: "frame-header-claims-" + size.name + "-after-ready", send: writeAll(cat(hs, longHeader(0, size.n))), close: true, want: O},
		)
	}
	list = append(list,
		attack{name: "ready-truncated-property", send: writeAll(cat(null, readyFrame(truncated))), close: true, want: H},
		attack{name: "ready-name-length-equals-frame", send: writeAll(cat(null, readyFrame(nameEqFrame))), close: true, want: H},
		attack{name: "ready-no-socket-type", send: writeAll(cat(null, readyFrame(prop("Identity", "x")))), close: true, want: H},
		attack{name: "ready-unknown-socket-type", send: writeAll(cat(null, readyFrame(prop("Socket-Type", "BOGUS")))), close: true, want: H},
		attack{name: "ready-incompatible-socket-type", send: writeAll(cat(null, readyFrame(prop("Socket-Type", "PUB")))), close: true, want: H},
		attack{name: "ready-property-length-near-2^32", send: writeAll(cat(null, readyFrame(near4G))), close: true, want: H},
		attack{name: "ready-uppercase-socket-type-name", send: writeAll(cat(null, readyFrame(prop("SOCKET-TYPE", "PUSH")))), close: true, want: H},
		attack{name: "mechanism-plain", send: writeAll(greetingWith(3, 0, "PLAIN")), close: true, want: H},
		attack{name: "mechanism-curve", send: writeAll(greetingWith(3, 0, "CURVE")), close: true, want: H},
		attack{name: "mechanism-garbage", send: writeAll(greetingWith(3, 0, "\x1b[31mNULL\x00X")), close: true, want: H},
		attack{name: "zmtp-1.0-greeting", send: writeAll([]byte{0x01, 0x00}), close: true, want: T},
		attack{name: "zmtp-2.0-greeting", send: writeAll([]byte{0xFF, 0, 0, 0, 0, 0, 0, 0, 1, 0x7F, 0x01, 0x08, 0x00, 0x00}), close: true, want: H},
		attack{name: "ping", send: writeAll(cat(hs, commandFrame(cmdPing, []byte{0, 10, 'c', 't', 'x'}))), hold: true, pong: true},
		// libzmq's heartbeat lands between the frames of a message (beats.go):
		// answered, the message goes on; any other command there is refused.
		attack{name: "ping-inside-multipart", send: writeAll(cat(hs, dataFrame(true, []byte("a")),
			commandFrame(cmdPing, []byte{0, 10, 'c', 't', 'x'}), dataFrame(false, []byte("b")))), hold: true, pong: true},
		attack{name: "ready-inside-multipart", send: writeAll(cat(hs, dataFrame(true, []byte("a")),
			readyFrame(prop("Socket-Type", "PUSH")), dataFrame(false, []byte("b")))), close: true, want: T},
		attack{name: "10000-frame-message", send: writeAll(tenThousand), close: true, want: O},
		attack{name: "reserved-flag-bits-after-ready", send: writeAll(cat(hs, []byte{0x40, 0x01, 'x'})), close: true, want: T},
		attack{name: "unknown-command-after-ready", send: writeAll(cat(hs, commandFrame("HELLO", nil))), close: true, want: T},
	)
	return list
}

// guardTarget is a guarded server under attack.
type guardTarget struct {
	addr  string // its TCP address
	stats func() Stats
	msgs  <-chan string // first frames of the data messages the application received
}

// hostileConfig keeps the handshake and greeting deadlines long, so every
// refusal seen in the suite is the validator's (or an eviction), not the
// clock's. (The greeting deadline has its own tests in evict_test.go.)
func hostileConfig() *Config {
	return &Config{HandshakeTimeout: 20 * time.Second, GreetingTimeout: 20 * time.Second}
}

// runHostileSuite runs every attack against tg, each followed by a real
// zmq4 PUSH round trip, and checks the resources afterwards.
func runHostileSuite(t *testing.T, tg guardTarget) {
	base := measure(t)
	for _, a := range hostileAttacks() {
		ok := t.Run(a.name, func(t *testing.T) {
			before := tg.stats()
			n := max(a.conns, 1)
			keep := a.hold || a.close || a.pong
			var conns []net.Conn
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			for range n {
				c, err := net.Dial("tcp", tg.addr)
				if err != nil {
					t.Fatalf("dial: %v", err)
				}
				c.SetWriteDeadline(time.Now().Add(5 * time.Second))
				if a.send != nil {
					a.send(c)
				}
				if keep {
					conns = append(conns, c)
				} else {
					c.Close()
				}
			}
			if a.close {
				for _, c := range conns {
					if err := waitClosed(c, 5*time.Second); err != nil {
						t.Errorf("guard did not close the connection at once: %v", err)
					}
				}
			}
			if a.pong {
				for _, c := range conns {
					data, err := readUntilCommand(c, cmdPong, 5*time.Second)
					if err != nil {
						t.Errorf("no PONG: %v", err)
					} else if string(data) != "ctx" {
						t.Errorf("PONG context %q, want %q", data, "ctx")
					}
				}
			}
			// The real peer goes through while held connections are still open.
			zmqPushRoundTrip(t, "tcp://"+tg.addr, "after "+a.name, func(want string) error {
				return expectMsg(tg.msgs, want, 10*time.Second)
			})
			for _, c := range conns {
				c.Close()
			}
			conns = nil

			poll.WaitFor(t, 15*time.Second, "the guard to settle", func() bool {
				s := tg.stats()
				return s.Accepted-before.Accepted >= uint64(n)+1 && s.Pending == 0 && s.Open == 0
			})
			after := tg.stats()
			var delta [len(decodeguard.Counts{})]uint64
			for r := range delta {
				delta[r] = after.Refused[r] - before.Refused[r]
			}
			total := after.Refused.Total() - before.Refused.Total()
			switch {
			case a.mixed != nil:
				var sum uint64
				for _, r := range a.mixed {
					sum += delta[r]
				}
				if total != uint64(n) || sum != uint64(n) {
					t.Errorf("violations %v (total %d), want %d of %v", delta, total, n, a.mixed)
				}
			case a.want == decodeguard.ReasonNone:
				if total != 0 {
					t.Errorf("violations %v, want none", delta)
				}
			default:
				if total != uint64(n) || delta[a.want] != uint64(n) {
					t.Errorf("violations %v (total %d), want %d x %v", delta, total, n, a.want)
				}
			}
			t.Logf("violations by reason: %s", formatDelta(delta))
		})
		if !ok && testing.Short() {
			break
		}
	}
	end := expectNearBaseline(t, base, 15*time.Second)
	t.Logf("resources: baseline %d goroutines, %d fds, %d KiB heap; after the suite %d goroutines, %d fds, %d KiB heap",
		base.goroutines, base.fds, base.heap>>10, end.goroutines, end.fds, end.heap>>10)
}

func formatDelta(d [len(decodeguard.Counts{})]uint64) string {
	var parts []string
	for r, n := range d {
		if n > 0 {
			parts = append(parts, decodeguard.Reason(r).String()+"="+itoa(int(n)))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// TestHostileListener runs the attack suite against a guarded Listener
// read by Go code, as zmqguard's socket layer uses it.
func TestHostileListener(t *testing.T) {
	ctx := context.Background()
	l, err := Listen(ctx, "tcp", "127.0.0.1:0", "PULL", hostileConfig())
	if err != nil {
		t.Fatal(err)
	}
	s := startSink(t, l)
	defer s.close()
	runHostileSuite(t, guardTarget{addr: l.Addr().String(), stats: l.Stats, msgs: s.msgs})
}

// TestHostileZmq4Socket runs the same suite against an unmodified zmq4 PULL
// socket bound on the guarded transport's scheme.
func TestHostileZmq4Socket(t *testing.T) {
	tr, scheme := registerTestTransport(t, "tcp", hostileConfig())
	ctx, cancel := context.WithCancel(context.Background())
	pull := zmq4.NewPull(ctx, zmq4.WithLogger(quietLogger()))
	if err := pull.Listen(scheme + "://127.0.0.1:0"); err != nil {
		cancel()
		t.Fatal(err)
	}
	msgs := make(chan string, 1024)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			m, err := pull.Recv()
			if err != nil {
				// zmq4 reports each closed peer connection here; only the
				// socket's own end stops the pump.
				if errors.Is(err, context.Canceled) || ctx.Err() != nil {
					return
				}
				continue
			}
			if len(m.Frames) > 0 {
				select {
				case msgs <- string(m.Frames[0]):
				default:
				}
			}
		}
	}()
	defer func() {
		cancel()
		pull.Close()
		wg.Wait()
	}()
	runHostileSuite(t, guardTarget{addr: pull.Addr().String(), stats: tr.Stats, msgs: msgs})
}

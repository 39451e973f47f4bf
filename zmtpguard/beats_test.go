package zmtpguard

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/zmqguard/zmqguard/decodeguard"
)

// The heartbeat rule (beats.go): libzmq sends a PING, or the PONG answering
// one, between the frames of a multipart message when its heartbeat timer
// fires; the frame is handled as between messages and the message goes on.
// Other commands there are still refused.

var (
	innerPing = commandFrame(cmdPing, []byte{0, 0, 'c', 't', 'x'})
	innerPong = commandFrame(cmdPong, []byte("ctx"))
)

// beatCase is one stream a raw peer writes after its handshake, and what a
// guarded reader must make of it.
type beatCase struct {
	name string
	cfg  Config
	send []byte
	// want is the reader's outcome: each message as readOutcome renders
	// it, then, for a refused stream, the violation's reason and a word of
	// its detail.
	want       []string
	violation  decodeguard.Reason
	detailWord string
	pong       bool // a PONG echoing "ctx" comes back
}

func beatCases() []beatCase {
	a, b := dataFrame(true, []byte("a")), dataFrame(false, []byte("b"))
	ab := fmt.Sprintf("%q %q", "", [][]byte{[]byte("a"), []byte("b")})
	ping := fmt.Sprintf("%q %q", cmdPing, [][]byte{{0, 0, 'c', 't', 'x'}})
	pong := fmt.Sprintf("%q %q", cmdPong, [][]byte{[]byte("ctx")})
	big := make([]byte, 100)
	return []beatCase{
		{name: "ping", send: cat(a, innerPing, b), want: []string{ab, ping}, pong: true},
		{name: "pong", send: cat(a, innerPong, b), want: []string{ab, pong}},
		{name: "ping-and-pong-coalesced", send: cat(a, innerPong, innerPing, innerPing, innerPong, b), want: []string{ab, ping, pong}, pong: true},
		{name: "ping-then-message", send: cat(a, innerPing, b, dataFrame(false, []byte("c"))),
			want: []string{ab, ping, fmt.Sprintf("%q %q", "", [][]byte{[]byte("c")})}, pong: true},
		// The heartbeat counts toward neither MaxFrames nor MaxMessageSize.
		{name: "ping-at-max-frames", cfg: Config{MaxFrames: 2}, send: cat(a, innerPing, b), want: []string{ab, ping}, pong: true},
		{name: "ping-at-max-size", cfg: Config{MaxMessageSize: 100},
			send: cat(dataFrame(true, big[:99]), innerPing, dataFrame(false, big[:1])),
			want: []string{fmt.Sprintf("%q %q", "", [][]byte{big[:99], big[:1]}), ping}, pong: true},
		// Refused: another command there, a command over the command limit.
		{name: "ready", send: cat(a, readyFrame(prop("Socket-Type", "PUSH")), b),
			violation: decodeguard.ReasonTransport, detailWord: "inside a multipart message"},
		{name: "subscribe", send: cat(a, commandFrame(cmdSubscribe, []byte("t")), b),
			violation: decodeguard.ReasonTransport, detailWord: "inside a multipart message"},
		{name: "unknown", send: cat(a, commandFrame("NOPE", nil), b),
			violation: decodeguard.ReasonTransport, detailWord: "inside a multipart message"},
		{name: "ping-over-command-limit", cfg: Config{MaxHandshakeSize: 64},
			send:      cat(a, commandFrame(cmdPing, make([]byte, 70)), b),
			violation: decodeguard.ReasonOversize, detailWord: "command limit"},
	}
}

// TestHeartbeatInsideMultipart: a raw TCP peer writes its handshake, then
// frame, command, frame; a guarded Listener's Conn reads the message
// whole, then the heartbeat; its PONG reaches the peer. Other commands
// inside the message are violations.
func TestHeartbeatInsideMultipart(t *testing.T) {
	for _, tc := range beatCases() {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			var vmu sync.Mutex
			var viols []Violation
			cfg.OnViolation = func(v Violation) { vmu.Lock(); viols = append(viols, v); vmu.Unlock() }
			l, err := Listen(context.Background(), "tcp", "127.0.0.1:0", "PULL", &cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			raw, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			raw.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := raw.Write(cat(handshakeAs("PUSH"), tc.send)); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := l.Accept(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.NetConn().SetReadDeadline(time.Now().Add(10 * time.Second))
			var got []string
			var m Message
			for len(got) < len(tc.want) {
				if err = c.ReadMessage(&m); err != nil {
					break
				}
				got = append(got, fmt.Sprintf("%q %q", m.Command, m.Frames))
				if m.Command == cmdPing {
					if err := c.Pong(&m); err != nil {
						t.Fatal(err)
					}
					if err := c.Flush(); err != nil {
						t.Fatal(err)
					}
				}
			}
			if tc.violation == decodeguard.ReasonNone {
				if err != nil || !slices.Equal(got, tc.want) {
					t.Fatalf("read %q, %v; want %q", got, err, tc.want)
				}
			} else {
				var v *Violation
				if err == nil {
					err = c.ReadMessage(&m)
				}
				if !errors.As(err, &v) || v.Reason != tc.violation || !strings.Contains(v.Detail, tc.detailWord) {
					t.Fatalf("read %q, then %v; want a %v violation about %q", got, err, tc.violation, tc.detailWord)
				}
				vmu.Lock()
				n := len(viols)
				vmu.Unlock()
				if n != 1 {
					t.Fatalf("OnViolation called %d times, want 1", n)
				}
			}
			if tc.pong {
				data, err := readUntilCommand(raw, cmdPong, 10*time.Second)
				if err != nil || string(data) != "ctx" {
					t.Fatalf("PONG %q, %v; want context %q", data, err, "ctx")
				}
			}
		})
	}
}

// TestHeartbeatInsideMultipartTryRead: the socket reader's way (ReadMessage,
// then TryReadMessage while whole messages are buffered) gives the same
// messages, and TryReadMessage never reports a message whose heartbeat has
// arrived but whose last frame has not.
func TestHeartbeatInsideMultipartTryRead(t *testing.T) {
	stream := cat(dataFrame(false, []byte("x")), dataFrame(true, []byte("a")), innerPing, dataFrame(false, []byte("b")))
	cut := len(stream) - len(dataFrame(false, []byte("b")))
	nc := newBytesConn(stream[:cut])
	c := &Conn{nc: nc, br: bufio.NewReaderSize(nc, 1024), cfg: Config{}.withDefaults(), local: "PULL"}
	var m Message
	if err := c.ReadMessage(&m); err != nil || string(m.Frames[0]) != "x" {
		t.Fatalf("first message %q, %v", m.Frames, err)
	}
	if got, err := c.TryReadMessage(&m); got || err != nil {
		t.Fatalf("frame and heartbeat buffered, last frame not: TryReadMessage = %v, %v, want false", got, err)
	}
	nc = newBytesConn(stream)
	c = &Conn{nc: nc, br: bufio.NewReaderSize(nc, 1024), cfg: Config{}.withDefaults(), local: "PULL"}
	var out []string
	if err := c.ReadMessage(&m); err != nil {
		t.Fatal(err)
	}
	for {
		got, err := c.TryReadMessage(&m)
		if err != nil {
			t.Fatal(err)
		}
		if !got {
			break
		}
		out = append(out, fmt.Sprintf("%q %q", m.Command, m.Frames))
	}
	want := []string{fmt.Sprintf("%q %q", "", [][]byte{[]byte("a"), []byte("b")}), fmt.Sprintf("%q %q", cmdPing, [][]byte{{0, 0, 'c', 't', 'x'}})}
	if !slices.Equal(out, want) {
		t.Fatalf("TryReadMessage read %q, want %q", out, want)
	}
}

// TestHeartbeatInsideMultipartCurve: the same under CURVE, where the
// command flag travels inside each frame's box (frames boxed with the
// fixed fuzz session key).
func TestHeartbeatInsideMultipartCurve(t *testing.T) {
	box := func(nonce uint64, flags byte, data string) []byte { return fuzzMessage(nonce, flags, []byte(data)) }
	for _, tc := range []struct {
		name   string
		cfg    Config
		stream []byte
		want   []string
		reason decodeguard.Reason
	}{
		{name: "ping", stream: cat(box(3, curveFlagMore, "a"), box(4, curveFlagCommand, "\x04PING\x00\x00ctx"), box(5, 0, "b")),
			want: []string{`"" ["a" "b"]`, `"PING" ["\x00\x00ctx"]`}},
		{name: "pong", stream: cat(box(3, curveFlagMore, "a"), box(4, curveFlagCommand, "\x04PONGctx"), box(5, 0, "b")),
			want: []string{`"" ["a" "b"]`, `"PONG" ["ctx"]`}},
		// The heartbeat counts toward neither MaxFrames nor MaxMessageSize,
		// while the data frames still do.
		{name: "ping-at-limits", cfg: Config{MaxFrames: 2, MaxMessageSize: 16},
			stream: cat(box(3, curveFlagMore, "aaaaaaaaaaaaaaa"), box(4, curveFlagCommand, "\x04PING\x00\x00ctx"), box(5, 0, "b")),
			want:   []string{`"" ["aaaaaaaaaaaaaaa" "b"]`, `"PING" ["\x00\x00ctx"]`}},
		{name: "data-over-size-after-ping", cfg: Config{MaxMessageSize: 16},
			stream: cat(box(3, curveFlagMore, "aaaaaaaaaaaaaaa"), box(4, curveFlagCommand, "\x04PING\x00\x00ctx"), box(5, 0, "bc")),
			reason: decodeguard.ReasonOversize},
		{name: "ready", stream: cat(box(3, curveFlagMore, "a"), box(4, curveFlagCommand, "\x05READY"), box(5, 0, "b")),
			reason: decodeguard.ReasonTransport},
		{name: "ping-with-more", stream: cat(box(3, curveFlagMore, "a"), box(4, curveFlagCommand|curveFlagMore, "\x04PING\x00\x00"), box(5, 0, "b")),
			reason: decodeguard.ReasonTransport},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg.withDefaults()
			nc := newBytesConn(tc.stream)
			cs := newCurveState(&fuzzSession, true)
			cs.recvNonce = 2
			c := &Conn{nc: nc, br: bufio.NewReaderSize(nc, 1024), cfg: cfg, local: "PULL", cz: cs}
			c.br.Peek(len(tc.stream)) // fill the buffer: bytesConn gives it all at once
			if !c.messageBuffered() {
				t.Fatal("messageBuffered = false with the whole stream buffered")
			}
			out := readOutcome(c)
			if tc.reason == decodeguard.ReasonNone {
				want := append(tc.want, "error EOF")
				if !slices.Equal(out, want) {
					t.Fatalf("read %q, want %q", out, want)
				}
				return
			}
			if last := out[len(out)-1]; !strings.HasPrefix(last, "violation "+tc.reason.String()) {
				t.Fatalf("read %q, want a %v violation", out, tc.reason)
			}
		})
	}
}

// TestHeartbeatInsideMultipartZmq4: the zmq4 transport's stream (a zmq4
// PULL over the guarded transport) passes frame, PING, frame to zmq4 as
// one message, answers the PING at a boundary of zmq4's output, and still
// refuses a READY there.
func TestHeartbeatInsideMultipartZmq4(t *testing.T) {
	var vmu sync.Mutex
	var viols []Violation
	cfg := &Config{OnViolation: func(v Violation) { vmu.Lock(); viols = append(viols, v); vmu.Unlock() }}
	_, scheme := registerTestTransport(t, "tcp", cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pull := zmq4.NewPull(ctx, zmq4.WithLogger(quietLogger()))
	defer pull.Close()
	if err := pull.Listen(scheme + "://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	msgs := make(chan string, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := pull.Recv()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				continue
			}
			var parts []string
			for _, f := range m.Frames {
				parts = append(parts, string(f))
			}
			msgs <- strings.Join(parts, "|")
		}
	}()
	defer func() { cancel(); pull.Close(); <-done }()

	raw, err := net.Dial("tcp", pull.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := raw.Write(cat(handshakeAs("PUSH"), dataFrame(true, []byte("a")), innerPing, dataFrame(false, []byte("b")))); err != nil {
		t.Fatal(err)
	}
	if err := expectMsg(msgs, "a|b", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if data, err := readUntilCommand(raw, cmdPong, 10*time.Second); err != nil || string(data) != "ctx" {
		t.Fatalf("PONG %q, %v; want context %q", data, err, "ctx")
	}

	bad, err := net.Dial("tcp", pull.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	bad.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := bad.Write(cat(handshakeAs("PUSH"), dataFrame(true, []byte("c")), readyFrame(prop("Socket-Type", "PUSH")), dataFrame(false, []byte("d")))); err != nil {
		t.Fatal(err)
	}
	if err := waitClosed(bad, 10*time.Second); err != nil {
		t.Fatalf("READY inside a message: connection not closed: %v", err)
	}
	vmu.Lock()
	defer vmu.Unlock()
	if len(viols) != 1 || viols[0].Reason != decodeguard.ReasonTransport || !strings.Contains(viols[0].Detail, "inside a multipart message") {
		t.Fatalf("violations %+v, want one about a command inside a multipart message", viols)
	}
	select {
	case m := <-msgs:
		t.Fatalf("zmq4 got %q from the refused stream", m)
	default:
	}
}

package socket

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	stdlog "log"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/zmqguard/zmqguard/internal/stack/zmtpwire"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
)

// rawFrame is one frame a zmtpPeer read.
type rawFrame struct {
	flags byte
	body  []byte
}

// command returns the frame's command name ("" for a data frame).
func (f rawFrame) command() string {
	if f.flags&zmtpwire.FlagCommand == 0 || len(f.body) == 0 || int(f.body[0]) >= len(f.body) {
		return ""
	}
	return string(f.body[1 : 1+int(f.body[0])])
}

// zmtpPeer is a hand-written ZMTP peer whose greeting announces version
// 3.minor: after its handshake it records every frame it receives and sends
// only what the test tells it to.
type zmtpPeer struct {
	nc     net.Conn
	mu     sync.Mutex
	frames []rawFrame
	err    error
	done   chan struct{}
}

// startZMTPPeer runs the handshake of a peer of type typ announcing ZMTP
// 3.minor over nc, then reads frames in the background until nc closes.
func startZMTPPeer(t *testing.T, nc net.Conn, typ string, minor byte) *zmtpPeer {
	t.Helper()
	g := zmtpwire.ZMQ4Greeting()
	g[11] = minor
	if _, err := nc.Write(append(g[:], command("READY", prop("Socket-Type", []byte(typ)))...)); err != nil {
		t.Fatal(err)
	}
	p := &zmtpPeer{nc: nc, done: make(chan struct{})}
	br := bufio.NewReader(nc)
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	var theirs [zmtpwire.GreetingSize]byte
	if _, err := io.ReadFull(br, theirs[:]); err != nil {
		t.Fatalf("raw peer: reading the greeting: %v", err)
	}
	if theirs[10] != 3 || theirs[11] != 1 {
		t.Fatalf("the socket's greeting announces %d.%d, want 3.1", theirs[10], theirs[11])
	}
	if f, err := readRawFrame(br); err != nil || f.command() != zmtpwire.CmdReady {
		t.Fatalf("raw peer: want READY, got %q (%v)", f.body, err)
	}
	nc.SetReadDeadline(time.Time{})
	t.Cleanup(func() { nc.Close(); <-p.done })
	go func() {
		defer close(p.done)
		for {
			f, err := readRawFrame(br)
			p.mu.Lock()
			if err != nil {
				p.err = err
				p.mu.Unlock()
				return
			}
			p.frames = append(p.frames, f)
			p.mu.Unlock()
		}
	}()
	return p
}

// readRawFrame reads one frame, refusing a size over 1 MiB.
func readRawFrame(br *bufio.Reader) (rawFrame, error) {
	flags, err := br.ReadByte()
	if err != nil {
		return rawFrame{}, err
	}
	var size uint64
	if flags&zmtpwire.FlagLong != 0 {
		var b [8]byte
		if _, err := io.ReadFull(br, b[:]); err != nil {
			return rawFrame{}, err
		}
		size = binary.BigEndian.Uint64(b[:])
	} else {
		b, err := br.ReadByte()
		if err != nil {
			return rawFrame{}, err
		}
		size = uint64(b)
	}
	if size > 1<<20 {
		return rawFrame{}, errors.New("frame too large")
	}
	body := make([]byte, size)
	_, err = io.ReadFull(br, body)
	return rawFrame{flags: flags, body: body}, err
}

// count returns how many frames were commands named cmd, and how many
// were data frames.
func (p *zmtpPeer) count(cmd string) (cmds, data int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.frames {
		switch c := f.command(); {
		case c == cmd:
			cmds++
		case f.flags&zmtpwire.FlagCommand == 0:
			data++
		}
	}
	return cmds, data
}

// closed reports whether the socket closed the connection.
func (p *zmtpPeer) closed() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// TestZMTP30PeerNotHeartbeated: a peer whose greeting says ZMTP 3.0 (as
// go-zeromq/zmq4 v0.17's does) is never sent a PING, which it would take
// for a data message, and is not disconnected by the heartbeat timeout
// however long it stays silent; a 3.1 peer in the same setting is PINGed
// and, silent, timed out. Both directions are checked: the socket binding
// (the raw peer dials) and the socket dialing (the raw peer accepts).
func TestZMTP30PeerNotHeartbeated(t *testing.T) {
	const ivl, tmo = 50 * time.Millisecond, 150 * time.Millisecond
	// Silent for > 5 × (interval + timeout): a 3.1 peer is dropped long
	// before, a 3.0 peer must still be there.
	const quiet = 1200 * time.Millisecond
	for _, tc := range []struct {
		name  string
		minor byte
		bind  bool
	}{
		{"3.0/bound", 0, true}, {"3.0/dialed", 0, false},
		{"3.1/bound", 1, true}, {"3.1/dialed", 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t, 30*time.Second)
			var log hbLog
			var logBuf syncBuffer
			r := mustSocket(t, NewRouter, func(o *Options) {
				o.HeartbeatInterval, o.HeartbeatTimeout = ivl, tmo
				o.OnEvent = log.add
				o.Logger = slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelInfo}))
			})
			const note = "socket peer speaks ZMTP 3.0"
			var nc net.Conn
			if tc.bind {
				ep := mustBind(t, r)
				var err error
				if nc, err = net.DialTimeout("tcp", strings.TrimPrefix(ep, "tcp://"), 5*time.Second); err != nil {
					t.Fatal(err)
				}
			} else {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
				mustDial(t, r, "tcp://"+ln.Addr().String())
				if nc, err = ln.Accept(); err != nil {
					t.Fatal(err)
				}
			}
			p := startZMTPPeer(t, nc, "DEALER", tc.minor)
			waitPeers(t, ctx, r, 1)
			if major, minor := r.Peers()[0].ZMTPVersion(); major != 3 || minor != int(tc.minor) {
				t.Fatalf("Peer.ZMTPVersion = %d.%d, want 3.%d", major, minor, tc.minor)
			}
			if tc.minor >= 1 {
				if st := r.Stats(); st.ZMTP30Peers != 0 {
					t.Fatalf("ZMTP30Peers = %d for a 3.1 peer", st.ZMTP30Peers)
				}
				// The 3.1 peer is PINGed, and timed out since it never
				// answers.
				poll.WaitForCtx(t, ctx, "a PING", func() bool { n, _ := p.count(zmtpwire.CmdPing); return n > 0 })
				poll.WaitForCtx(t, ctx, "heartbeat disconnect", func() bool { _, ok := log.find(isHeartbeatTimeout); return ok })
				if st := r.Stats(); st.HeartbeatTimeouts < 1 || st.PingsSent < 1 {
					t.Fatalf("stats %+v: want a PING and a heartbeat timeout", st)
				}
				if strings.Contains(logBuf.String(), note) {
					t.Fatalf("a 3.1 peer was logged as 3.0:\n%s", logBuf.String())
				}
				return
			}
			if st := r.Stats(); st.ZMTP30Peers != 1 {
				t.Fatalf("ZMTP30Peers = %d, want 1", st.ZMTP30Peers)
			}
			// The operator is told once why this peer is not heartbeated
			// (the line follows the peer's registration).
			poll.WaitForCtx(t, ctx, "the ZMTP 3.0 info line", func() bool { return strings.Contains(logBuf.String(), note) })
			if l := logBuf.String(); strings.Count(l, note) != 1 || !strings.Contains(l, "level=INFO") {
				t.Fatalf("want one info line %q, got:\n%s", note, l)
			}
			// Bounded by the clock, not a condition: the test is that
			// nothing happens for this long.
			time.Sleep(quiet)
			if pings, data := p.count(zmtpwire.CmdPing); pings != 0 || data != 0 {
				t.Fatalf("a silent ZMTP 3.0 peer received %d PINGs and %d data frames in %v", pings, data, quiet)
			}
			if p.closed() {
				t.Fatalf("the 3.0 peer's connection was closed: %v", p.err)
			}
			if e, ok := log.find(func(e Event) bool { return e.Kind == EventDisconnected }); ok {
				t.Fatalf("the 3.0 peer was disconnected: %v", e)
			}
			st := r.Stats()
			if st.HeartbeatTimeouts != 0 || st.PingsSent != 0 || st.Disconnects != 0 || st.Peers != 1 || st.ZMTP30Peers != 1 {
				t.Fatalf("stats %+v: want one connected 3.0 peer, no PING, no timeout", st)
			}
			// The connection still carries data both ways.
			if _, err := nc.Write(frame(0, []byte("alive"))); err != nil {
				t.Fatal(err)
			}
			m, err := r.Recv(ctx)
			if err != nil || len(m.Frames) != 2 || string(m.Frames[1]) != "alive" {
				t.Fatalf("Recv after the quiet spell: %q, %v", m.Frames, err)
			}
			if err := r.Send(ctx, m.Frames[0], []byte("back")); err != nil {
				t.Fatal(err)
			}
			poll.WaitForCtx(t, ctx, "the reply", func() bool { _, d := p.count(zmtpwire.CmdPing); return d == 1 })
		})
	}
}

// TestZMTP30PeerTTLStillHonoured: a 3.0 peer gets no PING of ours, but a
// PING it sends is still answered and the TTL it announces is still
// enforced (the rules that do not depend on the peer knowing PING).
func TestZMTP30PeerTTLStillHonoured(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	var log hbLog
	r := mustSocket(t, NewRouter, func(o *Options) {
		o.HeartbeatInterval, o.HeartbeatTimeout = 50*time.Millisecond, 10*time.Second
		o.OnEvent = log.add
		o.Logger = quietLogger()
	})
	ep := mustBind(t, r)
	nc, err := net.DialTimeout("tcp", strings.TrimPrefix(ep, "tcp://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	p := startZMTPPeer(t, nc, "DEALER", 0)
	// PING with a TTL of 3 deciseconds and context "zz".
	if _, err := nc.Write(command(zmtpwire.CmdPing, []byte{0, 3, 'z', 'z'})); err != nil {
		t.Fatal(err)
	}
	poll.WaitForCtx(t, ctx, "the PONG", func() bool { n, _ := p.count(zmtpwire.CmdPong); return n == 1 })
	poll.WaitForCtx(t, ctx, "TTL disconnect", func() bool { _, ok := log.find(isHeartbeatTimeout); return ok })
	if e, _ := log.find(isHeartbeatTimeout); !strings.Contains(e.Err.Error(), "TTL 300ms") {
		t.Fatalf("cause %q does not name the TTL", e.Err)
	}
	if n, _ := p.count(zmtpwire.CmdPing); n != 0 || r.Stats().PingsSent != 0 {
		t.Fatalf("the 3.0 peer was sent %d PINGs", n)
	}
}

// TestZMQ4PeersStayClean: plain go-zeromq/zmq4 v0.17 sockets (ZMTP 3.0)
// connected to zmqguard sockets with short heartbeats stay connected while
// idle for many heartbeat timeouts, receive no stray message (zmq4 would
// surface a PING as data), and still exchange data afterwards.
func TestZMQ4PeersStayClean(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	hb := func(o *Options) {
		o.HeartbeatInterval, o.HeartbeatTimeout = 50*time.Millisecond, 150*time.Millisecond
		o.Logger = quietLogger()
	}
	zctx, zcancel := context.WithCancel(ctx)
	defer zcancel()
	zopt := zmq4.WithLogger(discardStdLogger())

	// zmq4 DEALER -> our ROUTER; zmq4 SUB -> our XPUB.
	r := mustSocket(t, NewRouter, hb)
	x := mustSocket(t, NewXPub, hb)
	dealer := zmq4.NewDealer(zctx, zopt)
	defer dealer.Close()
	sub := zmq4.NewSub(zctx, zopt)
	defer sub.Close()
	if err := dealer.Dial(mustBind(t, r)); err != nil {
		t.Fatal(err)
	}
	if err := sub.Dial(mustBind(t, x)); err != nil {
		t.Fatal(err)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, "t"); err != nil {
		t.Fatal(err)
	}
	waitPeers(t, ctx, r, 1)
	waitPeers(t, ctx, x, 1)
	if m := recvString(t, ctx, x); !eq(m, "\x01t") {
		t.Fatalf("XPUB got %q, want the subscription", m)
	}
	// Every message each zmq4 socket surfaces.
	type got struct {
		from   string
		frames [][]byte
	}
	msgs := make(chan got, 64)
	var wg sync.WaitGroup
	for name, s := range map[string]zmq4.Socket{"dealer": dealer, "sub": sub} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				m, err := s.Recv()
				if err != nil || zctx.Err() != nil {
					return
				}
				msgs <- got{name, m.Frames}
			}
		}()
	}
	defer func() { zcancel(); dealer.Close(); sub.Close(); wg.Wait() }()

	time.Sleep(time.Second) // idle: the test is that nothing happens
	select {
	case m := <-msgs:
		t.Fatalf("idle zmq4 %s surfaced %q (a PING taken for data?)", m.from, m.frames)
	default:
	}
	for _, s := range []*Socket{r, x} {
		st := s.Stats()
		if st.Disconnects != 0 || st.HeartbeatTimeouts != 0 || st.PingsSent != 0 || st.Peers != 1 || st.ZMTP30Peers != 1 {
			t.Fatalf("%s stats %+v: want one connected ZMTP 3.0 peer, no PING, no disconnect", s.Type(), st)
		}
	}
	// Data still flows.
	if err := dealer.Send(zmq4.NewMsgString("ping?")); err != nil {
		t.Fatal(err)
	}
	m, err := r.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Send(ctx, m.Frames[0], []byte("pong!")); err != nil {
		t.Fatal(err)
	}
	if err := x.Send(ctx, []byte("t"), []byte("news")); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"dealer": "pong!", "sub": "news"}
	for len(want) > 0 {
		select {
		case m := <-msgs:
			last := string(m.frames[len(m.frames)-1])
			if want[m.from] != last {
				t.Fatalf("zmq4 %s got %q, want %q", m.from, m.frames, want[m.from])
			}
			delete(want, m.from)
		case <-ctx.Done():
			t.Fatalf("no data within the test's time: still waiting for %v", want)
		}
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func discardStdLogger() *stdlog.Logger { return stdlog.New(io.Discard, "", 0) }

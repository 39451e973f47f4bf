package zmtpguard

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"golang.org/x/crypto/nacl/box"
)

func TestCurveConfigVerify(t *testing.T) {
	_, sec := mustKeyPair(t)
	for name, cc := range map[string]*CurveConfig{
		"server without authorizer": {Server: true, SecretKey: sec},
		"server without key":        {Server: true, Authorize: allowAnyClient},
		"client without server key": {SecretKey: sec},
	} {
		cfg := Config{Curve: cc}
		if err := cfg.Verify(); err == nil {
			t.Errorf("%s: Verify passed", name)
		}
	}
	if _, err := newTransport("tcp", &Config{Curve: &CurveConfig{Server: true, SecretKey: sec, Authorize: allowAnyClient}}); err == nil {
		t.Error("NewTransport accepted a CURVE config it cannot honour")
	}
}

// curvePair is a CURVE server Listener and what a client needs.
type curvePair struct {
	l              *Listener
	srvPub, cliPub CurveKey
	cliSec         CurveKey
	viol           chan Violation
}

func newCurvePair(t *testing.T, ctx context.Context, local SocketType, mod func(*Config)) *curvePair {
	t.Helper()
	p := &curvePair{viol: make(chan Violation, 64)}
	var srvSec CurveKey
	p.srvPub, srvSec = mustKeyPair(t)
	p.cliPub, p.cliSec = mustKeyPair(t)
	cfg := &Config{
		Curve: &CurveConfig{Server: true, SecretKey: srvSec, Logger: discardLogger(), Authorize: func(key CurveKey, _ net.Addr) (bool, string) {
			return key == p.cliPub, "user-" + key.fingerprint()
		}},
		OnViolation: func(v Violation) {
			select {
			case p.viol <- v:
			default:
			}
		},
	}
	if mod != nil {
		mod(cfg)
	}
	l, err := Listen(ctx, "tcp", "127.0.0.1:0", local, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	p.l = l
	return p
}

func (p *curvePair) clientConfig() *Config {
	return &Config{Curve: &CurveConfig{SecretKey: p.cliSec, ServerKey: p.srvPub}}
}

func (p *curvePair) expect(t *testing.T, want decodeguard.Reason, detail string) Violation {
	t.Helper()
	select {
	case v := <-p.viol:
		if v.Reason != want || !strings.Contains(v.Detail, detail) {
			t.Errorf("violation %v; want reason %v with %q", &v, want, detail)
		}
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("no violation within 20 s (want %v %q)", want, detail)
	}
	return Violation{}
}

func TestCurveGoToGo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := newCurvePair(t, ctx, "ROUTER", nil)
	accepted := make(chan *Conn, 1)
	go func() {
		c, err := p.l.Accept(ctx)
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	cli, err := Dial(ctx, "tcp", p.l.Addr().String(), "DEALER", []byte("me"), p.clientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	srv := <-accepted
	if srv == nil {
		t.Fatal("accept failed")
	}
	defer srv.Close()
	if md := srv.Peer(); md.CurveKey != p.cliPub || md.Identity != "me" || md.UserID != "user-"+p.cliPub.fingerprint() || md.SocketType != "DEALER" {
		t.Errorf("server sees %+v", md)
	}
	if md := cli.Peer(); md.CurveKey != p.srvPub || md.SocketType != "ROUTER" {
		t.Errorf("client sees %+v", md)
	}
	big := bytes.Repeat([]byte("z"), 200<<10) // larger than the read buffer
	var m Message
	for round := 0; round < 3; round++ {
		if err := cli.WriteMessage([]byte("a"), []byte{}, big); err != nil {
			t.Fatal(err)
		}
		cli.WriteCommand(cmdPing, []byte("\x00\x0actx"))
		if err := cli.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := srv.ReadMessage(&m); err != nil {
			t.Fatal(err)
		}
		if len(m.Frames) != 3 || string(m.Frames[0]) != "a" || len(m.Frames[1]) != 0 || !bytes.Equal(m.Frames[2], big) || m.Size() != 1+len(big) {
			t.Fatalf("server read %d frames, size %d", len(m.Frames), m.Size())
		}
		if err := srv.ReadMessage(&m); err != nil || m.Command != cmdPing {
			t.Fatalf("expected PING: %v %q", err, m.Command)
		}
		srv.Pong(&m)
		srv.WriteMessage([]byte("reply"))
		if err := srv.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := cli.ReadMessage(&m); err != nil || m.Command != cmdPong || string(m.Frames[0]) != "ctx" {
			t.Fatalf("expected PONG ctx: %v %q %q", err, m.Command, m.Frames)
		}
		if err := cli.ReadMessage(&m); err != nil || string(m.Frames[0]) != "reply" {
			t.Fatalf("expected reply: %v %q", err, m.Frames)
		}
	}
}

// --- a raw, scriptable CURVE client for hostile tests ---

type rawCurve struct {
	t                  *testing.T
	nc                 net.Conn
	srvPub             [32]byte
	cliPub, cliSec     [32]byte
	shortPub, shortSec *[32]byte
	serverShort        [32]byte
	cookie             []byte
	session            [32]byte
	nonce              uint64
}

func dialRawCurve(t *testing.T, p *curvePair) *rawCurve {
	t.Helper()
	nc, err := net.DialTimeout("tcp", p.l.Addr().String(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(30 * time.Second))
	r := &rawCurve{t: t, nc: nc, srvPub: p.srvPub, cliPub: p.cliPub, cliSec: p.cliSec}
	r.shortPub, r.shortSec, _ = box.GenerateKey(rand.Reader)
	g := greetingWith(3, 0, "CURVE")
	nc.Write(g)
	var peer [greetingSize]byte
	if _, err := io.ReadFull(nc, peer[:]); err != nil {
		t.Fatal("reading server greeting:", err)
	}
	if string(peer[12:17]) != "CURVE" || peer[32] != 1 {
		t.Fatalf("server greeting %x", peer)
	}
	return r
}

func (r *rawCurve) helloFrame() []byte {
	r.nonce = 1
	hello := append([]byte("\x05HELLO\x01\x00"), make([]byte, 72)...)
	hello = append(hello, r.shortPub[:]...)
	hello = binary.BigEndian.AppendUint64(hello, r.nonce)
	var n [24]byte
	shortNonce(&n, noncePrefixHello, r.nonce)
	hello = box.Seal(hello, make([]byte, 64), &n, &r.srvPub, r.shortSec)
	return append(appendFrameHeader(nil, flagCommand, len(hello)), hello...)
}

func readRawFrame(nc net.Conn) (byte, []byte, error) {
	var h [9]byte
	if _, err := io.ReadFull(nc, h[:1]); err != nil {
		return 0, nil, err
	}
	hl := headerLen(h[0])
	if _, err := io.ReadFull(nc, h[1:hl]); err != nil {
		return 0, nil, err
	}
	size := uint64(h[1])
	if hl == 9 {
		size = binary.BigEndian.Uint64(h[1:9])
	}
	if size > 1<<20 {
		return 0, nil, errors.New("frame too large")
	}
	b := make([]byte, size)
	_, err := io.ReadFull(nc, b)
	return h[0], b, err
}

func (r *rawCurve) welcome() {
	r.t.Helper()
	_, w, err := readRawFrame(r.nc)
	if err != nil || len(w) != curveWelcomeSize || string(w[:8]) != "\x07WELCOME" {
		r.t.Fatalf("WELCOME: %v %q", err, w)
	}
	var n [24]byte
	longNonce(&n, noncePrefixWelcome, w[8:24])
	plain, ok := box.Open(nil, w[24:], &n, &r.srvPub, r.shortSec)
	if !ok {
		r.t.Fatal("WELCOME does not open")
	}
	copy(r.serverShort[:], plain[:32])
	r.cookie = plain[32:]
	box.Precompute(&r.session, &r.serverShort, r.shortSec)
}

func (r *rawCurve) initiateFrame(cookie, metadata []byte) []byte {
	var n [24]byte
	var vl [16]byte
	rand.Read(vl[:])
	longNonce(&n, noncePrefixVouch, vl[:])
	vouch := box.Seal(nil, append(append([]byte{}, r.shortPub[:]...), r.srvPub[:]...), &n, &r.serverShort, &r.cliSec)
	plain := append(append(append(append([]byte{}, r.cliPub[:]...), vl[:]...), vouch...), metadata...)
	r.nonce++
	init := append([]byte("\x08INITIATE"), cookie...)
	init = binary.BigEndian.AppendUint64(init, r.nonce)
	shortNonce(&n, noncePrefixInitiate, r.nonce)
	init = box.SealAfterPrecomputation(init, plain, &n, &r.session)
	return append(appendFrameHeader(nil, flagCommand, len(init)), init...)
}

func (r *rawCurve) ready() {
	r.t.Helper()
	_, b, err := readRawFrame(r.nc)
	if err != nil || string(b[:6]) != "\x05READY" {
		r.t.Fatalf("READY: %v %q", err, b)
	}
}

// message boxes one frame with the given nonce.
func (r *rawCurve) message(nonce uint64, flags byte, data []byte) []byte {
	var n [24]byte
	shortNonce(&n, noncePrefixMsgC, nonce)
	body := binary.BigEndian.AppendUint64([]byte("\x07MESSAGE"), nonce)
	body = box.SealAfterPrecomputation(body, append([]byte{flags}, data...), &n, &r.session)
	return append(appendFrameHeader(nil, 0, len(body)), body...)
}

func (r *rawCurve) handshake() {
	r.nc.Write(r.helloFrame())
	r.welcome()
	r.nc.Write(r.initiateFrame(r.cookie, prop("Socket-Type", "PUSH")))
	r.ready()
}

func TestCurveHostile(t *testing.T) {
	A, H, O, T := decodeguard.ReasonAuth, decodeguard.ReasonHandshake, decodeguard.ReasonOversize, decodeguard.ReasonTransport
	type step struct {
		name   string
		run    func(r *rawCurve, p *curvePair)
		reason decodeguard.Reason
		detail string
	}
	for _, s := range []step{
		{"null greeting", nil, A, "does not offer CURVE"},
		{"PLAIN greeting", nil, A, "does not offer CURVE"},
		{"HTTP request", nil, T, ""},
		{"TLS ClientHello", nil, T, ""},
		{"valid HELLO then garbage", func(r *rawCurve, _ *curvePair) {
			r.nc.Write(r.helloFrame())
			r.welcome()
			r.nc.Write([]byte("\x04\x05GARBAGEGARBAGE"))
		}, H, ""},
		{"HELLO for another server key", func(r *rawCurve, _ *curvePair) {
			other, _, _ := box.GenerateKey(rand.Reader)
			r.srvPub = *other
			r.nc.Write(r.helloFrame())
		}, A, "wrong server key"},
		{"HELLO claiming 1 GiB", func(r *rawCurve, _ *curvePair) {
			r.nc.Write(longHeader(flagCommand, 1<<30))
		}, O, ""},
		{"HELLO padding not zero", func(r *rawCurve, _ *curvePair) {
			h := r.helloFrame()
			h[20] = 1
			r.nc.Write(h)
		}, H, "padding"},
		{"INITIATE with a forged cookie", func(r *rawCurve, _ *curvePair) {
			r.nc.Write(r.helloFrame())
			r.welcome()
			c := append([]byte{}, r.cookie...)
			c[40] ^= 1
			r.nc.Write(r.initiateFrame(c, prop("Socket-Type", "PUSH")))
		}, A, "cookie"},
		{"INITIATE metadata over MaxHandshakeSize", func(r *rawCurve, _ *curvePair) {
			r.nc.Write(r.helloFrame())
			r.welcome()
			r.nc.Write(r.initiateFrame(r.cookie, append(prop("Socket-Type", "PUSH"), prop("X-Big", strings.Repeat("b", 20<<10))...)))
		}, O, "INITIATE"},
		{"INITIATE metadata without Socket-Type", func(r *rawCurve, _ *curvePair) {
			r.nc.Write(r.helloFrame())
			r.welcome()
			r.nc.Write(r.initiateFrame(r.cookie, prop("Identity", "x")))
		}, H, "Socket-Type"},
		{"INITIATE metadata with a huge property length", func(r *rawCurve, _ *curvePair) {
			r.nc.Write(r.helloFrame())
			r.welcome()
			md := append([]byte{11}, "Socket-Type"...)
			md = binary.BigEndian.AppendUint32(md, 0xFFFFFFF0)
			r.nc.Write(r.initiateFrame(r.cookie, md))
		}, H, "exceeds"},
		{"unlisted client key", func(r *rawCurve, _ *curvePair) {
			_, sec, _ := box.GenerateKey(rand.Reader)
			r.cliSec = *sec
			pub, _ := curvePublicKey(CurveKey(*sec))
			r.cliPub = pub
			r.nc.Write(r.helloFrame())
			r.welcome()
			r.nc.Write(r.initiateFrame(r.cookie, prop("Socket-Type", "PUSH")))
		}, A, "refused by the authorizer"},
		{"vouch for another client key", func(r *rawCurve, _ *curvePair) {
			// Claims the listed key but cannot vouch with its secret.
			_, sec, _ := box.GenerateKey(rand.Reader)
			r.cliSec = *sec
			r.nc.Write(r.helloFrame())
			r.welcome()
			r.nc.Write(r.initiateFrame(r.cookie, prop("Socket-Type", "PUSH")))
		}, A, "vouch"},
		{"replayed MESSAGE", func(r *rawCurve, _ *curvePair) {
			r.handshake()
			m := r.message(3, 0, []byte("once"))
			r.nc.Write(append(m, m...))
		}, A, "replayed or reordered"},
		{"reordered MESSAGE", func(r *rawCurve, _ *curvePair) {
			r.handshake()
			r.nc.Write(append(r.message(5, 0, []byte("five")), r.message(4, 0, []byte("four"))...))
		}, A, "replayed or reordered"},
		{"forged MESSAGE", func(r *rawCurve, _ *curvePair) {
			r.handshake()
			m := r.message(3, 0, []byte("tampered"))
			m[len(m)-1] ^= 0x80
			r.nc.Write(m)
		}, A, "fails authentication"},
		{"MESSAGE shorter than its overhead", func(r *rawCurve, _ *curvePair) {
			r.handshake()
			r.nc.Write(dataFrame(false, []byte("\x07MESSAGE")))
		}, T, "shorter"},
		{"MESSAGE claiming more than MaxMessageSize", func(r *rawCurve, _ *curvePair) {
			r.handshake()
			r.nc.Write(longHeader(0, 1<<40))
		}, O, ""},
		{"plain data frame after the handshake", func(r *rawCurve, _ *curvePair) {
			r.handshake()
			r.nc.Write(dataFrame(false, bytes.Repeat([]byte("p"), 40)))
		}, T, "expected a MESSAGE"},
		{"reserved inner flag bits", func(r *rawCurve, _ *curvePair) {
			r.handshake()
			r.nc.Write(r.message(3, 0x80, []byte("x")))
		}, T, "reserved"},
	} {
		t.Run(s.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			p := newCurvePair(t, ctx, "PULL", nil)
			sink := startSink(t, p.l)
			defer sink.close()
			if s.run == nil {
				nc, err := net.Dial("tcp", p.l.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer nc.Close()
				switch s.name {
				case "PLAIN greeting":
					nc.Write(greetingWith(3, 0, "PLAIN"))
				case "HTTP request":
					nc.Write([]byte(httpRequest))
				case "TLS ClientHello":
					nc.Write(tlsClientHello)
				default:
					nc.Write(handshakeAs("PUSH"))
				}
				p.expect(t, s.reason, s.detail)
				if err := waitClosed(nc, 20*time.Second); err != nil {
					t.Error(err)
				}
				return
			}
			r := dialRawCurve(t, p)
			s.run(r, p)
			p.expect(t, s.reason, s.detail)
			if err := waitClosed(r.nc, 20*time.Second); err != nil {
				t.Error(err)
			}
			if st := p.l.Stats(); st.Refused[s.reason] == 0 {
				t.Errorf("violation not counted: %+v", st.Refused)
			}
		})
	}
}

// TestCurveCookieReplay: an INITIATE carrying the cookie another connection
// received is refused, though it is a genuine cookie from this server.
func TestCurveCookieReplay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := newCurvePair(t, ctx, "PULL", nil)
	sink := startSink(t, p.l)
	defer sink.close()
	first := dialRawCurve(t, p)
	first.nc.Write(first.helloFrame())
	first.welcome()
	second := dialRawCurve(t, p)
	second.shortPub, second.shortSec = first.shortPub, first.shortSec // same C' as well
	second.nc.Write(second.helloFrame())
	second.welcome()
	second.nc.Write(second.initiateFrame(first.cookie, prop("Socket-Type", "PUSH")))
	p.expect(t, decodeguard.ReasonAuth, "cookie")
	if err := waitClosed(second.nc, 20*time.Second); err != nil {
		t.Error(err)
	}
	// The first connection, with its own cookie, still completes.
	first.nc.Write(first.initiateFrame(first.cookie, prop("Socket-Type", "PUSH")))
	first.ready()
	first.nc.Write(first.message(3, 0, []byte("hello")))
	if err := expectMsg(sink.msgs, "hello", 20*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestCurveSilentAfterGreeting: the handshake deadline applies to a client
// that sends a CURVE greeting and nothing more.
func TestCurveSilentAfterGreeting(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := newCurvePair(t, ctx, "PULL", func(c *Config) { c.HandshakeTimeout = 300 * time.Millisecond })
	sink := startSink(t, p.l)
	defer sink.close()
	r := dialRawCurve(t, p)
	p.expect(t, decodeguard.ReasonHandshake, "deadline")
	if err := waitClosed(r.nc, 20*time.Second); err != nil {
		t.Error(err)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestCurveRefusalLog: a refused key is logged by fingerprint, at most once
// per refusalLogInterval, and never as raw key bytes.
func TestCurveRefusalLog(t *testing.T) {
	var buf bytes.Buffer
	cc := &CurveConfig{Logger: slog.New(slog.NewTextHandler(&buf, nil))}
	k, _ := mustKeyPair(t)
	for i := 0; i < 5; i++ {
		logRefusal(cc, k, "127.0.0.1:1", "refused by the authorizer")
	}
	out := buf.String()
	if strings.Count(out, "CURVE client refused") != 1 || !strings.Contains(out, "key_fingerprint="+k.fingerprint()) {
		t.Fatalf("log: %q", out)
	}
	if strings.Contains(out, k.String()) {
		t.Fatal("log holds the key itself")
	}
	// A fresh key per refusal is held to refusalLogBurst lines per interval.
	buf.Reset()
	for i := 0; i < 3*refusalLogBurst; i++ {
		k, _ := mustKeyPair(t)
		logRefusal(cc, k, "127.0.0.1:1", "refused by the authorizer")
	}
	if n := strings.Count(buf.String(), "CURVE client refused"); n > refusalLogBurst {
		t.Fatalf("%d lines for %d fresh keys in one interval, want at most %d", n, 3*refusalLogBurst, refusalLogBurst)
	}
	if lim := cc.refusals.Load(); lim != nil {
		lim.Flush(time.Now()) // the summary, and no timer left behind
	}
}

// TestMessageBoxMatchesNaCl: the per-direction MESSAGE box produces and
// opens exactly what NaCl's box does with the full 24-byte nonce.
func TestMessageBoxMatchesNaCl(t *testing.T) {
	var key [32]byte
	rand.Read(key[:])
	mb := newMessageBox(&key, noncePrefixMsgC)
	for _, size := range []int{1, 2, 31, 32, 33, 34, 63, 64, 65, 101, 300, 70000} {
		plain := make([]byte, size)
		rand.Read(plain)
		for _, n := range []uint64{1, 3, 1 << 40, 1<<64 - 1} {
			var nonce [24]byte
			shortNonce(&nonce, noncePrefixMsgC, n)
			want := box.SealAfterPrecomputation([]byte("pre"), plain, &nonce, &key)
			got := mb.seal([]byte("pre"), plain, n)
			if !bytes.Equal(got, want) {
				t.Fatalf("seal of %d bytes, nonce %d differs from NaCl", size, n)
			}
			out, flags, ok := mb.openFrame([]byte("x"), want[3:], n)
			if !ok || flags != plain[0] || !bytes.Equal(out, append([]byte("x"), plain[1:]...)) {
				t.Fatalf("open of %d bytes, nonce %d: ok=%v", size, n, ok)
			}
			if _, _, ok := mb.openFrame(nil, want[3:], n+1); ok {
				t.Fatal("opened under the wrong nonce")
			}
			bad := append([]byte{}, want[3:]...)
			bad[len(bad)-1] ^= 1
			if _, _, ok := mb.openFrame(nil, bad, n); ok {
				t.Fatal("opened a tampered box")
			}
		}
	}
}

// TestCurvePendingPool: idle connections on a CURVE listener are bounded by
// the pending pool exactly as under NULL, and a real CURVE client still
// gets in while they are held.
func TestCurvePendingPool(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := newCurvePair(t, ctx, "PULL", func(c *Config) {
		c.MaxPendingHandshakes = 2
		c.GreetingTimeout = 20 * time.Second
		c.HandshakeTimeout = 20 * time.Second
	})
	sink := startSink(t, p.l)
	defer sink.close()
	for range 6 {
		nc, err := net.Dial("tcp", p.l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.Write(greetingWith(3, 0, "CURVE")[:20]) // a partial greeting, then silence
	}
	poll.WaitFor(t, 20*time.Second, "evictions", func() bool { return p.l.Stats().Evicted >= 4 })
	c, err := Dial(ctx, "tcp", p.l.Addr().String(), "PUSH", nil, p.clientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.WriteMessage([]byte("through"))
	c.Flush()
	if err := expectMsg(sink.msgs, "through", 20*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestCurveMessageBuffered: MessageBuffered sees whole CURVE messages
// through the boxed MORE flags, and never claims a partial one.
func TestCurveMessageBuffered(t *testing.T) {
	first := fuzzMessage(3, 0, []byte("first"))
	part1 := fuzzMessage(4, curveFlagMore, []byte("b1"))
	part2 := fuzzMessage(5, curveFlagMore, bytes.Repeat([]byte("b"), 300))
	part3 := fuzzMessage(6, 0, []byte("b3"))
	for _, tc := range []struct {
		name string
		rest []byte
		want bool
	}{
		{"nothing", nil, false},
		{"two of three frames", cat(part1, part2), false},
		{"a frame cut short", cat(part1, part2, part3[:len(part3)-1]), false},
		{"whole three frames", cat(part1, part2, part3), true},
		{"a replayed frame", cat(first), true},
		{"a command", fuzzMessage(4, curveFlagCommand, []byte("\x04PING\x00\x00")), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := cat(first, tc.rest)
			nc := newBytesConn(data)
			cs := newCurveState(&fuzzSession, true)
			cs.recvNonce = 2
			c := &Conn{nc: nc, br: bufio.NewReaderSize(nc, 4096), cfg: Config{}.withDefaults(), local: "PULL", cz: cs}
			var m Message
			if err := c.ReadMessage(&m); err != nil || string(m.Frames[0]) != "first" {
				t.Fatalf("first message: %v", err)
			}
			if got := c.messageBuffered(); got != tc.want {
				t.Fatalf("MessageBuffered = %v, want %v", got, tc.want)
			}
			if tc.want && tc.name == "whole three frames" {
				if err := c.ReadMessage(&m); err != nil || len(m.Frames) != 3 {
					t.Fatalf("second message: %v, %d frames", err, len(m.Frames))
				}
			}
		})
	}
}

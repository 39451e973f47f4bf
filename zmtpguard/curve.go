package zmtpguard

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/curve25519"
	"golang.org/x/crypto/nacl/box"
	"golang.org/x/crypto/nacl/secretbox"
	"golang.org/x/crypto/salsa20/salsa" //lint:ignore SA1019 CURVE needs the HSalsa20 core and the raw XSalsa20 stream (ZMTP CURVE, RFC 26), which only this package exposes

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
)

// mechanismCURVE is the greeting's mechanism name for CURVE (RFC 25).
const mechanismCURVE = "CURVE"

// CURVE command names (RFC 25 ZMTP-CURVE).
const (
	cmdHello    = "HELLO"
	cmdWelcome  = "WELCOME"
	cmdInitiate = "INITIATE"
	cmdMessage  = "MESSAGE"
)

// Sizes of the CURVE commands (bodies, command name included).
const (
	curveHelloSize   = 6 + 2 + 72 + 32 + 8 + 80 // 200
	curveWelcomeSize = 8 + 16 + 144             // 168
	curveCookieSize  = 16 + 80                  // 96
	// curveInitiateMin is INITIATE with empty metadata: name, cookie,
	// short nonce, and the box of C, the vouch nonce and the vouch box.
	curveInitiateMin = 9 + curveCookieSize + 8 + box.Overhead + 32 + 16 + 80 // 257
	curveReadyMin    = 6 + 8 + box.Overhead                                  // 30
	// curveMessageOverhead is what MESSAGE adds to a frame's body: name,
	// short nonce, MAC, flags byte.
	curveMessageOverhead = 8 + 8 + box.Overhead + 1 // 33
	// curveErrorMax is the largest ERROR command body.
	curveErrorMax = 6 + 1 + 255
)

// The nonce prefixes of CurveZMQ (RFC 26). Short nonces (an 8-byte
// big-endian counter) follow the 16-byte prefixes, long (16 random bytes)
// the 8-byte ones.
const (
	noncePrefixHello    = "CurveZMQHELLO---"
	noncePrefixWelcome  = "WELCOME-"
	noncePrefixCookie   = "COOKIE--"
	noncePrefixVouch    = "VOUCH---"
	noncePrefixInitiate = "CurveZMQINITIATE"
	noncePrefixReady    = "CurveZMQREADY---"
	noncePrefixMsgC     = "CurveZMQMESSAGEC" // client to server
	noncePrefixMsgS     = "CurveZMQMESSAGES" // server to client
)

// CurveConfig selects the CURVE security mechanism (ZeroMQ RFC 25 and 26)
// for a connection, a Listener or a Socket (through Config.Curve). Either
// side of a connection may be the CURVE server, independently of which one
// listens.
type CurveConfig struct {
	// Server makes this side the CURVE server: it holds the key pair
	// clients know, and admits clients through Authorize.
	Server bool
	// SecretKey is this side's long-term secret key (server or client);
	// the public key is derived from it. Required.
	SecretKey CurveKey
	// ServerKey is the server's long-term public key, which a client must
	// know in advance. Required for a client; ignored for a server.
	ServerKey CurveKey
	// Authorize admits or refuses a CURVE client once its handshake has
	// proven that it holds the secret of key, its long-term public key;
	// remote is its network address. It returns whether the client is
	// admitted and, if so, an optional user id assigned to the connection
	// ([Metadata.UserID]). Required for a server: use a [KeySet]'s
	// Authorize method to admit listed keys only, or a function that
	// returns true to admit any key (libzmq's behaviour without ZAP). It
	// runs on the handshake's goroutine, for every client: keep it fast and
	// never block in it.
	Authorize func(key CurveKey, remote net.Addr) (ok bool, userID string)
	// Logger receives a line for the first refusal of each client key
	// (by fingerprint), at most 4 such lines per 10 s, and a summary line
	// that counts the others. Nil means slog.Default().
	Logger *slog.Logger

	// refusals is the limiter of the refusal lines, one per CurveConfig,
	// created at the first refusal.
	refusals atomic.Pointer[ratelog.Limiter]
}

// refusalLogInterval is the limiter interval of the refusal lines.
const refusalLogInterval = 10 * time.Second

func (cc *CurveConfig) verify() error {
	// The public key is derived per handshake (an X25519 operation each
	// time Verify runs would double the cost of a Dial); the handshake
	// refuses the rare secret whose public key is degenerate.
	if cc.SecretKey.isZero() {
		return errors.New("zmtpguard: Config.Curve.SecretKey is not set")
	}
	if cc.Server {
		if cc.Authorize == nil {
			return errors.New("zmtpguard: Config.Curve.Authorize is nil (a CURVE server needs one: a KeySet's Authorize, or a function admitting any key)")
		}
	} else if cc.ServerKey.isZero() {
		return errors.New("zmtpguard: Config.Curve.ServerKey is not set (a CURVE client needs the server's public key)")
	}
	return nil
}

func (cc *CurveConfig) logger() *slog.Logger {
	if cc.Logger != nil {
		return cc.Logger
	}
	return slog.Default()
}

// curveGreeting returns the greeting for the CURVE mechanism in role server.
func curveGreeting(server bool) [greetingSize]byte {
	g := localGreeting
	clear(g[12:32])
	copy(g[12:32], mechanismCURVE)
	if server {
		g[32] = 1
	}
	return g
}

// refusalLogBurst bounds the refusal detail lines of all keys together per
// refusalLogInterval, so that a client making a fresh key per connection
// cannot flood the log; the refusals it holds back are counted in the next
// summary line.
const refusalLogBurst = ratelog.FirstWarnings

// logRefusal logs a refused client through cc's limiter (internal/stack/ratelog):
// a detail line for the first refusal of a key fingerprint, at most
// refusalLogBurst of them per refusalLogInterval, and summary lines that
// count the rest.
func logRefusal(cc *CurveConfig, key CurveKey, remote, why string) {
	lim := cc.refusals.Load()
	if lim == nil {
		lim = ratelog.New(ratelog.Config{Logger: cc.logger(), Interval: refusalLogInterval, Component: "zmtpguard",
			Message: "zmtpguard: refused CURVE clients (summary)"})
		if !cc.refusals.CompareAndSwap(nil, lim) {
			lim = cc.refusals.Load()
		}
	}
	fp := key.fingerprint()
	if lim.Drop(decodeguard.ReasonAuth.String(), fp, time.Now()) != ratelog.First || !lim.Enabled() {
		return
	}
	lim.Logger().LogAttrs(context.Background(), slog.LevelWarn, "zmtpguard: CURVE client refused",
		slog.String(ratelog.KeyComponent, "zmtpguard"), slog.String(ratelog.KeyReason, decodeguard.ReasonAuth.String()),
		slog.String("key_fingerprint", fp), slog.String(ratelog.KeyPeer, ratelog.Escape(remote, 256)),
		slog.Uint64(ratelog.KeyCount, 1), slog.String(ratelog.KeyErr, why))
}

// sharedKey computes the NaCl box key between pub and priv. Unlike
// box.Precompute it refuses a low-order public key, whose shared secret
// would be a constant anyone can compute.
func sharedKey(out *[32]byte, pub, priv *[32]byte) bool {
	s, err := curve25519.X25519(priv[:], pub[:])
	if err != nil {
		return false
	}
	copy(out[:], s)
	var zeros [16]byte
	salsa.HSalsa20(out, &zeros, out, &salsa.Sigma)
	return true
}

// shortNonce fills n with a 16-byte prefix and a big-endian counter.
func shortNonce(n *[24]byte, prefix string, counter uint64) {
	copy(n[:16], prefix)
	binary.BigEndian.PutUint64(n[16:], counter)
}

// longNonce fills n with an 8-byte prefix and the 16 bytes of long.
func longNonce(n *[24]byte, prefix string, long []byte) {
	copy(n[:8], prefix)
	copy(n[8:], long)
}

// curveState is a CURVE connection's state after the handshake: the
// session key and the nonce counters of each direction.
type curveState struct {
	key       [32]byte   // box key between the short-term keys
	sendBox   messageBox // MESSAGEs sent
	recvBox   messageBox // MESSAGEs received
	sendNonce uint64     // last short nonce sent
	recvNonce uint64     // last short nonce received
	rbuf      []byte     // a MESSAGE not wholly buffered
	wplain    []byte     // plaintext of the frame being written
	wbox      []byte     // the MESSAGE being written
}

// newCurveState returns the session state for key; server selects which
// nonce prefix each direction uses.
func newCurveState(key *[32]byte, server bool) *curveState {
	cs := &curveState{key: *key}
	send, recv := noncePrefixMsgC, noncePrefixMsgS
	if server {
		send, recv = recv, send
	}
	cs.sendBox = newMessageBox(key, send)
	cs.recvBox = newMessageBox(key, recv)
	return cs
}

// curveStep is the handshake's view of the stream.
type curveStep struct {
	nc  net.Conn
	br  *bufio.Reader
	cfg *Config
	hdr [9]byte
}

// readCommand reads one command frame of at most max body bytes (checked
// before anything is allocated) and returns its name and body (name
// included). An ERROR command is a violation that says so.
func (s *curveStep) readCommand(during string, max int) (string, []byte, error) {
	b, err := s.br.Peek(1)
	if err != nil {
		return "", nil, handshakeIOError("reading "+during, err, len(b), b)
	}
	b, err = s.br.Peek(headerLen(b[0]))
	hdr, ok, verr := parseFrameHeader(b, int64(max))
	if verr != nil {
		var v *Violation
		if errors.As(verr, &v) {
			if v.Reason == decodeguard.ReasonTransport {
				v.Reason = decodeguard.ReasonHandshake
			}
			v.Detail = during + " " + v.Detail
		}
		return "", nil, verr
	}
	if !ok {
		return "", nil, handshakeIOError("reading "+during, err, len(b), b)
	}
	if !hdr.Command() {
		return "", nil, violation(decodeguard.ReasonHandshake, "expected a "+during+" command, got a data frame", hdr.Size, b)
	}
	frame := make([]byte, hdr.Len+int(hdr.Size)) // at most max + 9
	if n, err := io.ReadFull(s.br, frame); err != nil {
		return "", nil, handshakeIOError("reading "+during, err, n, frame[:n])
	}
	body := frame[hdr.Len:]
	name, _, verr := parseCommand(body)
	if verr != nil {
		var v *Violation
		if errors.As(verr, &v) {
			v.Reason = decodeguard.ReasonHandshake
		}
		return "", nil, verr
	}
	if string(name) == cmdError {
		return "", nil, violation(decodeguard.ReasonHandshake, "peer refused the CURVE handshake with ERROR", int64(len(body)), body)
	}
	if string(name) != during {
		return "", nil, violation(decodeguard.ReasonHandshake, "expected "+during+", got another command", int64(len(body)), body)
	}
	return string(name), body, nil
}

func (s *curveStep) writeCommand(body []byte) error {
	h := s.hdr[:]
	if len(body) > 255 {
		h[0] = flagCommand | flagLong
		putUint64(h[1:9], uint64(len(body)))
		h = h[:9]
	} else {
		h[0] = flagCommand
		h[1] = byte(len(body))
		h = h[:2]
	}
	buf := append(append(make([]byte, 0, len(h)+len(body)), h...), body...)
	if _, err := s.nc.Write(buf); err != nil {
		return handshakeIOError("sending a CURVE command", err, 0, nil)
	}
	return nil
}

// appendProperties appends ZMTP metadata properties (as in READY).
func appendProperties(b []byte, local SocketType, identity []byte) []byte {
	prop := func(b []byte, name string, value []byte) []byte {
		b = append(b, byte(len(name)))
		b = append(b, name...)
		b = binary.BigEndian.AppendUint32(b, uint32(len(value)))
		return append(b, value...)
	}
	b = prop(b, "Socket-Type", []byte(local))
	if len(identity) > 0 {
		b = prop(b, "Identity", identity)
	}
	return b
}

// curveServerHandshake runs the server side of the CURVE handshake after
// the greetings: HELLO, WELCOME, INITIATE, READY.
func curveServerHandshake(nc net.Conn, br *bufio.Reader, cfg *Config, local SocketType, identity []byte) (*curveState, Metadata, error) {
	cc := cfg.Curve
	st := &curveStep{nc: nc, br: br, cfg: cfg}
	secret := [32]byte(cc.SecretKey)
	public, err := curvePublicKey(cc.SecretKey)
	if err != nil {
		return nil, Metadata{}, err
	}

	// HELLO: version, padding, C', short nonce, Box[64 zeros](C'->S).
	_, hello, err := st.readCommand(cmdHello, curveHelloSize)
	if err != nil {
		return nil, Metadata{}, err
	}
	cst, helloNonce, err := parseHello(hello, &secret)
	if err != nil {
		return nil, Metadata{}, err
	}
	var clientShort [32]byte
	copy(clientShort[:], hello[80:112])

	// WELCOME: long nonce, Box[S' + cookie](S->C'), the cookie being
	// secretbox[C' + s'](K) under a key K made for this connection only.
	serverShortPub, serverShortSec, err := box.GenerateKey(rand.Reader)
	if err != nil {
		return nil, Metadata{}, err
	}
	var cookieKey [32]byte
	var longs [32]byte
	if _, err := rand.Read(cookieKey[:]); err != nil {
		return nil, Metadata{}, err
	}
	if _, err := rand.Read(longs[:]); err != nil {
		return nil, Metadata{}, err
	}
	var nonce [24]byte
	longNonce(&nonce, noncePrefixCookie, longs[:16])
	plainCookie := append(append(make([]byte, 0, 64), clientShort[:]...), serverShortSec[:]...)
	cookie := append(append(make([]byte, 0, curveCookieSize), longs[:16]...), secretbox.Seal(nil, plainCookie, &nonce, &cookieKey)...)
	clear(plainCookie)
	welcomePlain := append(append(make([]byte, 0, 128), serverShortPub[:]...), cookie...)
	longNonce(&nonce, noncePrefixWelcome, longs[16:])
	welcome := append(append([]byte("\x07WELCOME"), longs[16:]...), box.SealAfterPrecomputation(nil, welcomePlain, &nonce, &cst)...)
	if err := st.writeCommand(welcome); err != nil {
		return nil, Metadata{}, err
	}

	// INITIATE: cookie, short nonce, Box[C + vouch + metadata](C'->S').
	_, init, err := st.readCommand(cmdInitiate, curveInitiateMin+cfg.MaxHandshakeSize)
	if err != nil {
		return nil, Metadata{}, err
	}
	if len(init) < curveInitiateMin {
		return nil, Metadata{}, violation(decodeguard.ReasonHandshake, "INITIATE of "+itoa(len(init))+" bytes is shorter than "+itoa(curveInitiateMin), int64(len(init)), init)
	}
	// The cookie must be the one sent on this connection, holding this
	// connection's C' and s'.
	longNonce(&nonce, noncePrefixCookie, init[9:25])
	opened, ok := secretbox.Open(nil, init[25:105], &nonce, &cookieKey)
	if !ok || subtle.ConstantTimeCompare(opened[:32], clientShort[:]) != 1 || subtle.ConstantTimeCompare(opened[32:], serverShortSec[:]) != 1 {
		return nil, Metadata{}, violation(decodeguard.ReasonAuth, "INITIATE cookie is not the one this connection's WELCOME carried (forged or replayed)", int64(len(init)), nil)
	}
	clear(opened)
	initNonce := binary.BigEndian.Uint64(init[105:113])
	if initNonce <= helloNonce {
		return nil, Metadata{}, violation(decodeguard.ReasonAuth, "INITIATE short nonce does not follow HELLO's", int64(initNonce), nil)
	}
	var session [32]byte
	if !sharedKey(&session, &clientShort, serverShortSec) {
		return nil, Metadata{}, violation(decodeguard.ReasonAuth, "client short-term key is a low-order point", -1, nil)
	}
	shortNonce(&nonce, noncePrefixInitiate, initNonce)
	plain, ok := box.OpenAfterPrecomputation(nil, init[113:], &nonce, &session)
	if !ok {
		return nil, Metadata{}, violation(decodeguard.ReasonAuth, "INITIATE box does not open (forged)", int64(len(init)), nil)
	}
	// plain: C (32), vouch long nonce (16), vouch box (80), metadata.
	var clientKey [32]byte
	copy(clientKey[:], plain[:32])
	// The vouch, Box[C' + S](C->S'), proves the client holds C's secret
	// and meant this server and this short-term key.
	var vouchKey [32]byte
	if !sharedKey(&vouchKey, &clientKey, serverShortSec) {
		return nil, Metadata{}, violation(decodeguard.ReasonAuth, "client long-term key is a low-order point", -1, nil)
	}
	clear(serverShortSec[:])
	longNonce(&nonce, noncePrefixVouch, plain[32:48])
	vouch, ok := box.OpenAfterPrecomputation(nil, plain[48:128], &nonce, &vouchKey)
	clear(vouchKey[:])
	if !ok {
		return nil, Metadata{}, violation(decodeguard.ReasonAuth, "INITIATE vouch does not open (client does not hold its key's secret)", -1, nil)
	}
	if subtle.ConstantTimeCompare(vouch[:32], clientShort[:]) != 1 || subtle.ConstantTimeCompare(vouch[32:], public[:]) != 1 {
		return nil, Metadata{}, violation(decodeguard.ReasonAuth, "INITIATE vouch names another short-term key or server", -1, nil)
	}
	md, err := parseReady(plain[128:], local, cfg)
	if err != nil {
		var v *Violation
		if errors.As(err, &v) {
			v.Detail = "INITIATE metadata: " + v.Detail
		}
		return nil, Metadata{}, err
	}
	md.CurveKey = CurveKey(clientKey)
	remote := nc.RemoteAddr()
	admit, userID := cc.Authorize(md.CurveKey, remote)
	if !admit {
		// RFC 25: the server answers a refused INITIATE with ERROR; the
		// reason is the ZAP status code 400, which libzmq clients report
		// as an authentication failure.
		st.writeCommand([]byte("\x05ERROR\x03400"))
		ra := ""
		if remote != nil {
			ra = remote.String()
		}
		logRefusal(cc, md.CurveKey, ra, "refused by the authorizer")
		return nil, Metadata{}, violation(decodeguard.ReasonAuth, "client key "+md.CurveKey.fingerprint()+" refused by the authorizer", -1, nil)
	}
	md.UserID = userID

	// READY: short nonce, Box[metadata](S'->C').
	cs := newCurveState(&session, true)
	cs.sendNonce, cs.recvNonce = 1, initNonce
	shortNonce(&nonce, noncePrefixReady, cs.sendNonce)
	ready := binary.BigEndian.AppendUint64([]byte("\x05READY"), cs.sendNonce)
	ready = box.SealAfterPrecomputation(ready, appendProperties(nil, local, identity), &nonce, &session)
	if err := st.writeCommand(ready); err != nil {
		return nil, Metadata{}, err
	}
	return cs, md, nil
}

// parseHello checks a HELLO body (exactly curveHelloSize bytes, name
// included) and opens its box with the server's secret. It returns the box
// key between C' and s and the client's short nonce.
func parseHello(hello []byte, secret *[32]byte) (key [32]byte, nonce uint64, err error) {
	if len(hello) != curveHelloSize {
		return key, 0, violation(decodeguard.ReasonHandshake, "HELLO of "+itoa(len(hello))+" bytes (want "+itoa(curveHelloSize)+")", int64(len(hello)), hello)
	}
	if hello[6] != 1 || hello[7] != 0 {
		return key, 0, violation(decodeguard.ReasonHandshake, "HELLO version is not 1.0", int64(len(hello)), hello[:8])
	}
	for _, b := range hello[8:80] {
		if b != 0 {
			return key, 0, violation(decodeguard.ReasonHandshake, "HELLO anti-amplification padding is not zero", int64(len(hello)), hello[:80])
		}
	}
	var clientShort [32]byte
	copy(clientShort[:], hello[80:112])
	nonce = binary.BigEndian.Uint64(hello[112:120])
	if !sharedKey(&key, &clientShort, secret) {
		return key, 0, violation(decodeguard.ReasonAuth, "HELLO short-term key is a low-order point", -1, nil)
	}
	var n [24]byte
	shortNonce(&n, noncePrefixHello, nonce)
	var out [64]byte
	opened, ok := box.OpenAfterPrecomputation(out[:0], hello[120:200], &n, &key)
	var zeros [64]byte
	if !ok || subtle.ConstantTimeCompare(opened, zeros[:]) != 1 {
		return [32]byte{}, 0, violation(decodeguard.ReasonAuth, "HELLO box does not open with this server's key (the client has a wrong server key)", -1, nil)
	}
	return key, nonce, nil
}

// curveClientHandshake runs the client side of the CURVE handshake after
// the greetings: HELLO, WELCOME, INITIATE, READY.
func curveClientHandshake(nc net.Conn, br *bufio.Reader, cfg *Config, local SocketType, identity []byte) (*curveState, Metadata, error) {
	cc := cfg.Curve
	st := &curveStep{nc: nc, br: br, cfg: cfg}
	secret := [32]byte(cc.SecretKey)
	public, err := curvePublicKey(cc.SecretKey)
	if err != nil {
		return nil, Metadata{}, err
	}
	server := [32]byte(cc.ServerKey)
	shortPub, shortSec, err := box.GenerateKey(rand.Reader)
	if err != nil {
		return nil, Metadata{}, err
	}
	defer clear(shortSec[:])
	var helloKey [32]byte
	if !sharedKey(&helloKey, &server, shortSec) {
		return nil, Metadata{}, errors.New("zmtpguard: Curve.ServerKey is a low-order point")
	}
	const helloNonce, initiateNonce = 1, 2
	var nonce [24]byte
	hello := make([]byte, 0, curveHelloSize)
	hello = append(hello, "\x05HELLO\x01\x00"...)
	hello = append(hello, make([]byte, 72)...)
	hello = append(hello, shortPub[:]...)
	hello = binary.BigEndian.AppendUint64(hello, helloNonce)
	shortNonce(&nonce, noncePrefixHello, helloNonce)
	hello = box.SealAfterPrecomputation(hello, make([]byte, 64), &nonce, &helloKey)
	if err := st.writeCommand(hello); err != nil {
		return nil, Metadata{}, err
	}

	_, welcome, err := st.readCommand(cmdWelcome, max(curveWelcomeSize, curveErrorMax))
	if err != nil {
		return nil, Metadata{}, err
	}
	if len(welcome) != curveWelcomeSize {
		return nil, Metadata{}, violation(decodeguard.ReasonHandshake, "WELCOME of "+itoa(len(welcome))+" bytes (want "+itoa(curveWelcomeSize)+")", int64(len(welcome)), welcome)
	}
	longNonce(&nonce, noncePrefixWelcome, welcome[8:24])
	wplain, ok := box.OpenAfterPrecomputation(nil, welcome[24:], &nonce, &helloKey)
	if !ok {
		return nil, Metadata{}, violation(decodeguard.ReasonAuth, "WELCOME does not open: the server does not hold Curve.ServerKey's secret", -1, nil)
	}
	var serverShort [32]byte
	copy(serverShort[:], wplain[:32])
	cookie := wplain[32:128]
	var session [32]byte
	if !sharedKey(&session, &serverShort, shortSec) {
		return nil, Metadata{}, violation(decodeguard.ReasonAuth, "server short-term key is a low-order point", -1, nil)
	}
	cs := newCurveState(&session, false)
	cs.sendNonce = initiateNonce

	// Vouch: Box[C' + S](C->S').
	var vouchKey [32]byte
	if !sharedKey(&vouchKey, &serverShort, &secret) {
		return nil, Metadata{}, violation(decodeguard.ReasonAuth, "server short-term key is a low-order point", -1, nil)
	}
	var vouchLong [16]byte
	if _, err := rand.Read(vouchLong[:]); err != nil {
		return nil, Metadata{}, err
	}
	longNonce(&nonce, noncePrefixVouch, vouchLong[:])
	vouch := box.SealAfterPrecomputation(nil, append(append(make([]byte, 0, 64), shortPub[:]...), server[:]...), &nonce, &vouchKey)
	clear(vouchKey[:])
	plain := append(make([]byte, 0, 128+64), public[:]...)
	plain = append(plain, vouchLong[:]...)
	plain = append(plain, vouch...)
	plain = appendProperties(plain, local, identity)
	initiate := append([]byte("\x08INITIATE"), cookie...)
	initiate = binary.BigEndian.AppendUint64(initiate, cs.sendNonce)
	shortNonce(&nonce, noncePrefixInitiate, cs.sendNonce)
	initiate = box.SealAfterPrecomputation(initiate, plain, &nonce, &cs.key)
	if err := st.writeCommand(initiate); err != nil {
		return nil, Metadata{}, err
	}

	_, ready, err := st.readCommand(cmdReady, max(curveReadyMin+cfg.MaxHandshakeSize, curveErrorMax))
	if err != nil {
		var v *Violation
		if errors.As(err, &v) && v.Detail == "peer refused the CURVE handshake with ERROR" {
			v.Reason = decodeguard.ReasonAuth
			v.Detail = "the CURVE server refused this client's key (ERROR instead of READY)"
		}
		return nil, Metadata{}, err
	}
	if len(ready) < curveReadyMin {
		return nil, Metadata{}, violation(decodeguard.ReasonHandshake, "READY of "+itoa(len(ready))+" bytes is shorter than "+itoa(curveReadyMin), int64(len(ready)), ready)
	}
	cs.recvNonce = binary.BigEndian.Uint64(ready[6:14])
	shortNonce(&nonce, noncePrefixReady, cs.recvNonce)
	props, ok := box.OpenAfterPrecomputation(nil, ready[14:], &nonce, &cs.key)
	if !ok {
		return nil, Metadata{}, violation(decodeguard.ReasonAuth, "READY box does not open (forged)", int64(len(ready)), nil)
	}
	md, err := parseReady(props, local, cfg)
	if err != nil {
		return nil, Metadata{}, err
	}
	md.CurveKey = cc.ServerKey
	return cs, md, nil
}

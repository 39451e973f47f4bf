package hostile

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/zmqguard/zmqguard/zmtpguard"

	"github.com/zmqguard/zmqguard/internal/stack/zmtpwire"
)

// The probe classes.
const (
	ClassTransport = "transport"
	ClassEnvelope  = "envelope"
	ClassPayload   = "payload"
)

// Defaults for Options.
const (
	DefaultHold    = 500 * time.Millisecond
	DefaultTimeout = 3 * time.Second
	// BurstSize is the number of connections the connect/close burst opens.
	BurstSize = 100
	// Nesting is the depth of the deeply nested msgpack payload.
	Nesting = 20000
)

// ErrWedged is returned by a probe that holds a stalled connection when the
// target stopped answering new connections while it was held.
var ErrWedged = errors.New("hostile: the target stopped answering while a stalled connection was held")

// Probe is one hostile input. Run connects to the endpoint addr
// ("tcp://host:port", "ipc://path" or "host:port"), delivers the input and
// returns nil when it was delivered — whatever the target did with it,
// closing the connection included. It returns an error when the input could
// not be delivered at all (nothing listening, no handshake), ErrWedged (wrapped)
// when the target stopped answering while the probe held a connection, or
// ctx's error.
type Probe struct {
	// Name identifies the probe, e.g. "http-get" or "payload-818001".
	Name string
	// Class is ClassTransport, ClassEnvelope or ClassPayload.
	Class string
	// Run delivers the probe to addr.
	Run func(ctx context.Context, addr string) error
}

// Options tunes the corpus. The zero value means the defaults.
type Options struct {
	// Hold is how long a probe holds a stalled connection (idle, half
	// greeting, old ZMTP greetings) and lingers after sending (default
	// DefaultHold, 500 ms). It should stay below the target's handshake
	// timeout (zmqguard's default: 5 s), so that the liveness check runs
	// while the connection is still stalled.
	Hold time.Duration
	// Timeout bounds each network step: connect, handshake, liveness check
	// (default DefaultTimeout, 3 s).
	Timeout time.Duration
}

func (o Options) withDefaults() Options {
	if o.Hold <= 0 {
		o.Hold = DefaultHold
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	return o
}

// Payloads returns the payload hazards by probe-name suffix, in corpus order.
// They are the frames that killed vLLM's receive loops or that a decoder must
// refuse before allocating: invalid UTF-8 in a str, a map keyed by a map,
// 20,000-deep nesting, an array claiming 2^32-1 elements, a bare int where an
// array is expected, an empty frame, and a frame of 1 MiB + 1 byte (one past
// zmqguard's default message size).
func Payloads() []NamedPayload {
	deep := bytes.Repeat([]byte{0x91}, Nesting) // fixarray of 1, nested
	deep = append(deep, 0xc0)
	big := make([]byte, 1<<20+1)
	big[0] = 0xdd // array 32, the rest junk that is never reached
	for i := 1; i < len(big); i++ {
		big[i] = 0xc1
	}
	return []NamedPayload{
		{"a3e08080", []byte{0xa3, 0xe0, 0x80, 0x80}},
		{"818001", []byte{0x81, 0x80, 0x01}},
		{"nesting-20000", deep},
		{"ddffffffff", []byte{0xdd, 0xff, 0xff, 0xff, 0xff}},
		{"45", []byte{0x45}},
		{"empty-frame", []byte{}},
		{"1MiB+1", big},
	}
}

// NamedPayload is one payload hazard.
type NamedPayload struct {
	Name  string
	Bytes []byte
}

// v3Request is a well-formed V3 handshake request, (GET_META_MSG, 0, 0),
// used as the body of the envelope probes.
var v3Request = []byte{0x93, 0xc4, 0x0c, 'g', 'e', 't', '_', 'm', 'e', 't', 'a', '_', 'm', 's', 'g', 0x00, 0x00}

// Corpus returns the whole built-in corpus in its replay order: transport
// probes, then envelope probes, then payload hazards. Probes that need the
// target's socket type learn it with Discover the first time they meet a
// target; the probes of one Corpus share what they learned.
func Corpus(opts Options) []Probe {
	o := &corpus{Options: opts.withDefaults()}
	var ps []Probe
	add := func(name, class string, run func(ctx context.Context, addr string) error) {
		ps = append(ps, Probe{Name: name, Class: class, Run: run})
	}
	g := zmtpwire.LocalGreeting()

	// Transport: stalled connections, checked while held.
	add("idle-connection", ClassTransport, o.stall(nil))
	add("half-greeting", ClassTransport, o.stall(g[:11]))
	add("zmtp1.0-greeting", ClassTransport, o.stall([]byte{0x01, 0x00}))
	add("zmtp2.0-greeting", ClassTransport, o.stall([]byte{0xff, 0, 0, 0, 0, 0, 0, 0, 0x01, 0x7f, 0x01, 0x05, 0x00, 0x00}))

	// Transport: other protocols and garbage.
	add("http-get", ClassTransport, o.raw(func() []byte {
		return []byte("GET / HTTP/1.1\r\nHost: localhost\r\nUser-Agent: zmqguard-scan\r\nAccept: */*\r\n\r\n")
	}))
	add("tls-client-hello", ClassTransport, o.raw(clientHello))
	add("random-64KiB", ClassTransport, o.raw(func() []byte {
		b := make([]byte, 64<<10)
		rand.Read(b)
		return b
	}))
	add("mechanism-plain", ClassTransport, o.raw(func() []byte { return greetingWith("PLAIN") }))
	add("mechanism-curve", ClassTransport, o.raw(func() []byte { return greetingWith("CURVE") }))

	// Transport: malformed READY commands after a valid greeting.
	add("ready-truncated-property", ClassTransport, o.ready(func(zmq4.SocketType) []byte {
		p := property("Socket-Type", "ROUTER")
		binary.BigEndian.PutUint32(p[1+len("Socket-Type"):], 64) // value length past the frame
		return p[:len(p)-3]
	}))
	add("ready-name-length-overflow", ClassTransport, o.ready(func(zmq4.SocketType) []byte {
		// A property name length equal to the whole command's length.
		return []byte{byte(1 + len(zmtpwire.CmdReady) + 3), 'S', 'o'}
	}))
	add("ready-no-socket-type", ClassTransport, o.ready(func(zmq4.SocketType) []byte {
		return property("Identity", "scan")
	}))
	add("ready-unknown-socket-type", ClassTransport, o.ready(func(zmq4.SocketType) []byte {
		return property("Socket-Type", "BOGUS")
	}))
	add("ready-incompatible-type", ClassTransport, o.ready(func(peer zmq4.SocketType) []byte {
		t := zmq4.Pub
		if zmtpwire.Compatible(t, peer) {
			t = zmq4.Pull
		}
		return property("Socket-Type", string(t))
	}))

	// Transport: after a valid handshake.
	add("ping-command", ClassTransport, o.afterHandshake(func(c *zmtpguard.Conn) error {
		if err := c.WriteCommand(zmtpwire.CmdPing, []byte{0x00, 0x0a, 's', 'c', 'a', 'n'}); err != nil {
			return err
		}
		return c.Flush()
	}))
	add("frame-claims-2^40", ClassTransport, o.afterHandshake(hugeFrame(1<<40)))
	add("frame-claims-2^62", ClassTransport, o.afterHandshake(hugeFrame(1<<62)))
	add("connect-close-burst-100", ClassTransport, o.burst)

	// Envelope shapes, as a DEALER (or the type the target accepts).
	add("envelope-no-delimiter", ClassEnvelope, o.envelope(v3Request))
	add("envelope-3-frames", ClassEnvelope, o.envelope([]byte{}, v3Request, []byte("extra")))
	seventy := make([][]byte, 70)
	for i := range seventy {
		seventy[i] = []byte{byte(i)}
	}
	add("envelope-70-frames", ClassEnvelope, o.envelope(seventy...))

	// Payload hazards, in the form the target expects.
	for _, p := range Payloads() {
		add("payload-"+p.Name, ClassPayload, o.payload(p.Bytes))
	}
	return ps
}

// corpus is the state the probes of one Corpus share: the options, and the
// socket type each target announced, learned once per target (a target
// that cannot be discovered is retried on the next probe).
type corpus struct {
	Options
	types sync.Map // endpoint -> zmq4.SocketType
}

// discover returns the socket type addr announces, from the cache or from
// Discover.
func (o *corpus) discover(ctx context.Context, addr string) (zmq4.SocketType, error) {
	if t, ok := o.types.Load(addr); ok {
		return t.(zmq4.SocketType), nil
	}
	t, err := Discover(ctx, addr, o.Timeout)
	if err != nil {
		return "", err
	}
	o.types.Store(addr, t)
	return t, nil
}

// stall holds a connection that sent only prefix (nothing for nil) and,
// while holding it, checks that the target still completes handshakes with
// others.
func (o *corpus) stall(prefix []byte) func(ctx context.Context, addr string) error {
	return func(ctx context.Context, addr string) error {
		peer, err := o.discover(ctx, addr)
		if err != nil {
			return err
		}
		nc, err := dialRaw(ctx, addr, o.Timeout)
		if err != nil {
			return err
		}
		defer nc.Close()
		start := time.Now()
		if len(prefix) > 0 {
			nc.SetWriteDeadline(time.Now().Add(o.Timeout))
			nc.Write(prefix) // the target may refuse at once: that is fine
		}
		if err := Alive(ctx, addr, peer, o.Timeout); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("%w: %v", ErrWedged, err)
		}
		if rest := o.Hold - time.Since(start); rest > 0 {
			drain(nc, rest)
		}
		return ctx.Err()
	}
}

// raw sends the bytes gen returns on a plain connection and lingers.
func (o *corpus) raw(gen func() []byte) func(ctx context.Context, addr string) error {
	return func(ctx context.Context, addr string) error {
		nc, err := dialRaw(ctx, addr, o.Timeout)
		if err != nil {
			return err
		}
		defer nc.Close()
		nc.SetWriteDeadline(time.Now().Add(o.Timeout))
		nc.Write(gen())
		drain(nc, o.linger())
		return ctx.Err()
	}
}

// ready sends a valid greeting followed by a READY command whose property
// list is what props returns for the target's announced type.
func (o *corpus) ready(props func(peer zmq4.SocketType) []byte) func(ctx context.Context, addr string) error {
	return func(ctx context.Context, addr string) error {
		peer, err := o.discover(ctx, addr)
		if err != nil {
			return err
		}
		nc, err := dialRaw(ctx, addr, o.Timeout)
		if err != nil {
			return err
		}
		defer nc.Close()
		g := zmtpwire.LocalGreeting()
		msg := append(g[:], command(zmtpwire.CmdReady, props(peer))...)
		nc.SetWriteDeadline(time.Now().Add(o.Timeout))
		nc.Write(msg)
		drain(nc, o.linger())
		return ctx.Err()
	}
}

// afterHandshake completes a valid handshake as the type the target expects,
// then lets send write on the connection.
func (o *corpus) afterHandshake(send func(c *zmtpguard.Conn) error) func(ctx context.Context, addr string) error {
	return func(ctx context.Context, addr string) error {
		peer, err := o.discover(ctx, addr)
		if err != nil {
			return err
		}
		c, err := handshakeAs(ctx, addr, LocalFor(peer), o.Timeout)
		if err != nil {
			return err
		}
		defer c.Close()
		c.NetConn().SetWriteDeadline(time.Now().Add(o.Timeout))
		send(c) // the target closing the connection on us is the expected outcome
		drain(c.NetConn(), o.linger())
		return ctx.Err()
	}
}

// hugeFrame writes the header of a data frame claiming size bytes, followed
// by a few bytes of body, directly on the stream.
func hugeFrame(size uint64) func(c *zmtpguard.Conn) error {
	return func(c *zmtpguard.Conn) error {
		var b [9 + 16]byte
		b[0] = zmtpwire.FlagLong
		binary.BigEndian.PutUint64(b[1:9], size)
		_, err := c.NetConn().Write(b[:])
		return err
	}
}

// burst opens and closes BurstSize connections back to back.
func (o *corpus) burst(ctx context.Context, addr string) error {
	delivered := 0
	var last error
	for range BurstSize {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		nc, err := dialRaw(ctx, addr, o.Timeout)
		if err != nil {
			last = err
			continue
		}
		delivered++
		nc.Close()
	}
	if delivered == 0 {
		return last
	}
	return nil
}

// envelope sends one message of frames after a handshake as a DEALER (or
// the type the target accepts).
func (o *corpus) envelope(frames ...[]byte) func(ctx context.Context, addr string) error {
	return func(ctx context.Context, addr string) error {
		peer, err := o.discover(ctx, addr)
		if err != nil {
			return err
		}
		c, err := handshakeAs(ctx, addr, envelopeLocal(peer), o.Timeout)
		if err != nil {
			return err
		}
		defer c.Close()
		c.NetConn().SetWriteDeadline(time.Now().Add(o.Timeout))
		if err := c.WriteMessage(frames...); err == nil {
			c.Flush()
		}
		drain(c.NetConn(), o.linger())
		return ctx.Err()
	}
}

// payload sends body as one message in the form the target expects: after
// the empty delimiter for a REQ, as is otherwise.
func (o *corpus) payload(body []byte) func(ctx context.Context, addr string) error {
	return func(ctx context.Context, addr string) error {
		peer, err := o.discover(ctx, addr)
		if err != nil {
			return err
		}
		local := LocalFor(peer)
		c, err := handshakeAs(ctx, addr, local, o.Timeout)
		if err != nil {
			return err
		}
		defer c.Close()
		frames := [][]byte{body}
		if local == zmq4.Req {
			frames = [][]byte{{}, body}
		}
		c.NetConn().SetWriteDeadline(time.Now().Add(o.Timeout))
		if err := c.WriteMessage(frames...); err == nil {
			c.Flush()
		}
		drain(c.NetConn(), o.linger())
		return ctx.Err()
	}
}

// linger is how long a probe waits after sending before it closes: long
// enough for the target to read what was sent, short enough to keep a pass
// quick.
func (o *corpus) linger() time.Duration {
	return min(o.Hold, 200*time.Millisecond)
}

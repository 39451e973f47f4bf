package hostile

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/zmqguard/zmqguard/zmtpguard"

	"github.com/zmqguard/zmqguard/internal/stack/zmtpwire"
)

// SplitEndpoint turns a ZeroMQ endpoint into a network and an address for
// net.Dial: "tcp://host:port" gives ("tcp", "host:port"), "ipc://path" gives
// ("unix", "path"), and a bare "host:port" is taken as tcp.
func SplitEndpoint(ep string) (network, address string, err error) {
	scheme, rest, ok := strings.Cut(ep, "://")
	if !ok {
		scheme, rest = "tcp", ep
	}
	switch scheme {
	case "tcp":
		host, port, err := net.SplitHostPort(rest)
		if err != nil {
			return "", "", fmt.Errorf("hostile: endpoint %q: %w", ep, err)
		}
		if host == "" || host == "*" {
			return "", "", fmt.Errorf("hostile: endpoint %q has no host to connect to", ep)
		}
		if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
			return "", "", fmt.Errorf("hostile: endpoint %q: port is not a number in 1..65535", ep)
		}
		return "tcp", net.JoinHostPort(host, port), nil
	case "ipc":
		if rest == "" {
			return "", "", fmt.Errorf("hostile: endpoint %q has an empty path", ep)
		}
		return "unix", rest, nil
	}
	return "", "", fmt.Errorf("hostile: endpoint %q: scheme must be tcp:// or ipc://", ep)
}

// dialRaw opens a plain stream connection to ep within timeout.
func dialRaw(ctx context.Context, ep string, timeout time.Duration) (net.Conn, error) {
	network, address, err := SplitEndpoint(ep)
	if err != nil {
		return nil, err
	}
	d := net.Dialer{Timeout: timeout}
	return d.DialContext(ctx, network, address)
}

// LocalFor returns the socket type a scanner plays towards a peer that
// announced peer: the type that sends it data in the form it expects (REQ to a
// ROUTER or REP, PUSH to a PULL, XSUB to a PUB or XPUB, ...). It returns ""
// for a type it does not know.
func LocalFor(peer zmq4.SocketType) zmq4.SocketType {
	switch peer {
	case zmq4.Router, zmq4.Rep:
		return zmq4.Req
	case zmq4.Dealer:
		return zmq4.Dealer
	case zmq4.Req:
		return zmq4.Router
	case zmq4.Pull:
		return zmq4.Push
	case zmq4.Push:
		return zmq4.Pull
	case zmq4.Pub, zmq4.XPub:
		return zmq4.XSub
	case zmq4.Sub, zmq4.XSub:
		return zmq4.XPub
	case zmq4.Pair:
		return zmq4.Pair
	}
	return ""
}

// envelopeLocal is the type envelope probes play: a DEALER where the peer
// takes one (ROUTER, REP, DEALER), since a DEALER sends frames exactly as
// given, else LocalFor's.
func envelopeLocal(peer zmq4.SocketType) zmq4.SocketType {
	if zmtpwire.Compatible(zmq4.Dealer, peer) {
		return zmq4.Dealer
	}
	return LocalFor(peer)
}

// ErrDemandsCurve is Discover's error for a peer whose greeting names the
// CURVE mechanism: it serves encrypted, key-admitted connections only, and
// refuses the NULL handshakes the corpus is made of.
var ErrDemandsCurve = errors.New("hostile: the peer demands CURVE security (its greeting names the CURVE mechanism; unauthenticated peers are refused)")

// Discover connects to ep, sends a ZMTP 3 greeting, and reads the peer's
// greeting and READY command to learn the socket type it announces. It never
// sends a READY itself, so the peer counts a failed handshake. Every length
// the peer sends is checked before anything is read.
func Discover(ctx context.Context, ep string, timeout time.Duration) (zmq4.SocketType, error) {
	nc, err := dialRaw(ctx, ep, timeout)
	if err != nil {
		return "", err
	}
	defer nc.Close()
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Now()) })
	defer stop()
	nc.SetDeadline(time.Now().Add(timeout))
	return discoverConn(nc)
}

// discoverConn is Discover on an open connection whose deadline is set.
func discoverConn(nc net.Conn) (zmq4.SocketType, error) {
	g := zmtpwire.LocalGreeting()
	if _, err := nc.Write(g[:]); err != nil {
		return "", fmt.Errorf("hostile: sending greeting: %w", err)
	}
	var peer [zmtpwire.GreetingSize]byte
	if _, err := io.ReadFull(nc, peer[:]); err != nil {
		return "", fmt.Errorf("hostile: reading the peer's greeting: %w", err)
	}
	if string(bytes.TrimRight(peer[12:32], "\x00")) == "CURVE" {
		return "", ErrDemandsCurve
	}
	if err := zmtpwire.CheckGreeting(peer[:], false); err != nil {
		return "", err
	}
	var hdr [9]byte
	if _, err := io.ReadFull(nc, hdr[:1]); err != nil {
		return "", fmt.Errorf("hostile: reading the peer's READY: %w", err)
	}
	if hdr[0]&zmtpwire.FlagCommand == 0 {
		return "", errors.New("hostile: the peer's first frame after the greeting is not a command")
	}
	hl := zmtpwire.HeaderLen(hdr[0])
	if _, err := io.ReadFull(nc, hdr[1:hl]); err != nil {
		return "", fmt.Errorf("hostile: reading the peer's READY: %w", err)
	}
	h, ok, err := zmtpwire.ParseFrameHeader(hdr[:hl], zmtpwire.DefaultMaxHandshakeSize)
	if err != nil || !ok {
		return "", fmt.Errorf("hostile: the peer's READY header is not acceptable: %v", err)
	}
	body := make([]byte, h.Size)
	if _, err := io.ReadFull(nc, body); err != nil {
		return "", fmt.Errorf("hostile: reading the peer's READY: %w", err)
	}
	name, data, err := zmtpwire.ParseCommand(body)
	if err != nil {
		return "", err
	}
	if string(name) != zmtpwire.CmdReady {
		return "", fmt.Errorf("hostile: the peer sent command %q, not READY", zmtpwire.CmdReady)
	}
	r, err := zmtpwire.ParseReady(data, "", zmtpwire.DefaultMaxProperties, zmtpwire.DefaultMaxPropertySize)
	if err != nil {
		return "", err
	}
	return zmq4.SocketType(r.SocketType), nil
}

// Alive reports, as a nil error, that ep still answers: a fresh ZMTP 3
// handshake as the socket type LocalFor(peer) completes. It retries every
// 50 ms (a listener may refuse a connection for a moment under its caps)
// until timeout, then returns the last failure.
func Alive(ctx context.Context, ep string, peer zmq4.SocketType, timeout time.Duration) error {
	network, address, err := SplitEndpoint(ep)
	if err != nil {
		return err
	}
	local := LocalFor(peer)
	if local == "" {
		return fmt.Errorf("hostile: no socket type known to talk to a %s", peer)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cfg := zmtpguard.Config{HandshakeTimeout: timeout}
	for {
		c, err := zmtpguard.Dial(ctx, network, address, zmtpguard.SocketType(local), nil, &cfg)
		if err == nil {
			c.Close()
			return nil
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("hostile: %s did not complete a ZMTP handshake within %s: %w", ep, timeout, err)
		case <-t.C:
		}
	}
}

// handshakeAs dials ep and completes a guarded handshake as local, with
// limits wide enough that the scanner's own oversize messages can be written.
func handshakeAs(ctx context.Context, ep string, local zmq4.SocketType, timeout time.Duration) (*zmtpguard.Conn, error) {
	network, address, err := SplitEndpoint(ep)
	if err != nil {
		return nil, err
	}
	cfg := zmtpguard.Config{HandshakeTimeout: timeout, MaxMessageSize: 4 << 20, MaxFrames: 1024}
	return zmtpguard.Dial(ctx, network, address, zmtpguard.SocketType(local), nil, &cfg)
}

// drain reads and discards what the peer sends until it closes the
// connection or linger passes, so that the peer has taken the probe's bytes
// before the connection goes.
func drain(nc net.Conn, linger time.Duration) {
	nc.SetReadDeadline(time.Now().Add(linger))
	var buf [4096]byte
	for {
		if _, err := nc.Read(buf[:]); err != nil {
			return
		}
	}
}

// command encodes a ZMTP command frame: flags, size, name length, name, data.
func command(name string, data []byte) []byte {
	size := 1 + len(name) + len(data)
	var b []byte
	if size > 255 {
		b = make([]byte, 9, 9+size)
		b[0] = zmtpwire.FlagCommand | zmtpwire.FlagLong
		binary.BigEndian.PutUint64(b[1:], uint64(size))
	} else {
		b = append(make([]byte, 0, 2+size), zmtpwire.FlagCommand, byte(size))
	}
	b = append(b, byte(len(name)))
	b = append(b, name...)
	return append(b, data...)
}

// property encodes one READY property: name length, name, 4-byte value
// length, value.
func property(name, value string) []byte {
	b := []byte{byte(len(name))}
	b = append(b, name...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(value)))
	return append(b, value...)
}

// greetingWith returns the local greeting with another mechanism name.
func greetingWith(mechanism string) []byte {
	g := zmtpwire.LocalGreeting()
	b := g[:]
	clear(b[12:32])
	copy(b[12:32], mechanism)
	return b
}

// clientHello is a plausible TLS 1.2 ClientHello record, as a TLS client
// (or a scanner fingerprinting TLS services) opens with.
func clientHello() []byte {
	body := []byte{0x03, 0x03}               // client_version TLS 1.2
	body = append(body, make([]byte, 32)...) // random
	body = append(body, 0)                   // session id length
	body = append(body, 0x00, 0x04, 0xc0, 0x2f, 0x00, 0x9c)
	body = append(body, 0x01, 0x00) // compression: null
	sni := []byte("localhost")
	ext := []byte{0x00, 0x00} // server_name
	ext = binary.BigEndian.AppendUint16(ext, uint16(len(sni)+5))
	ext = binary.BigEndian.AppendUint16(ext, uint16(len(sni)+3))
	ext = append(ext, 0)
	ext = binary.BigEndian.AppendUint16(ext, uint16(len(sni)))
	ext = append(ext, sni...)
	body = binary.BigEndian.AppendUint16(body, uint16(len(ext)))
	body = append(body, ext...)
	hs := []byte{0x01, byte(len(body) >> 16), byte(len(body) >> 8), byte(len(body))}
	hs = append(hs, body...)
	rec := []byte{0x16, 0x03, 0x01}
	rec = binary.BigEndian.AppendUint16(rec, uint16(len(hs)))
	return append(rec, hs...)
}

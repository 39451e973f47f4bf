// Package zmtpguard checks every ZMTP connection's byte stream before any
// ZMTP parser reads it.
//
//	ln, err := net.Listen("tcp", ":5555")
//	if err != nil {
//		return err
//	}
//	l, err := zmtpguard.NewListener(ln, "PULL", &zmtpguard.Config{MaxMessageSize: 4 << 20})
//	if err != nil {
//		return err
//	}
//	defer l.Close()
//	c, err := l.Accept(ctx) // only a peer whose handshake passed the guard
//	if err != nil {
//		return err
//	}
//	var m zmtpguard.Message
//	err = c.ReadMessage(&m) // a bad frame is a *Violation, refused before allocating
//
// (ExampleNewListener runs this against a real zmq4 peer and an HTTP client.)
//
// go-zeromq/zmq4's socket layer trusts its peers: a frame header claiming
// 2^40 bytes is allocated, a truncated READY property panics inside one of
// its goroutines, and a connection that never finishes its greeting stops the
// listener from accepting anyone else. zmtpguard keeps zmq4's sound parts (the
// greeting/security/READY exchange in [zmq4.Open]) and puts a validator in
// front of them:
//
//   - the peer's greeting is checked byte by byte as it arrives (signature,
//     ZMTP version 3.x, mechanism NULL, as-server flag), so a ZMTP 1.0 peer or
//     an HTTP client is refused after its first bytes;
//   - the peer's READY command is read and validated in full (every length
//     against the bytes present and a cap, property names and values bounded,
//     Socket-Type present, known and compatible, Identity at most 255 bytes)
//     before zmq4 sees a byte of it;
//   - after the handshake, every frame header is checked against
//     MaxMessageSize and MaxFrames before a body byte is read, and bodies are
//     read in bounded chunks so memory follows the bytes actually received,
//     never the length a header claims;
//   - commands after the handshake (PING, PONG, SUBSCRIBE, CANCEL, ERROR) are
//     returned as commands, never as data.
//
// [Handshake] runs the guarded handshake on one connection with deadlines
// (the peer's greeting within GreetingTimeout, the whole handshake within
// HandshakeTimeout); the resulting [Conn] reads and writes whole messages.
// [Listener] (from [NewListener]) accepts with back-off, runs each
// handshake in its own goroutine, enforces MaxConns and an optional source
// allowlist, bounds the handshakes
// in progress by evicting, when MaxPendingHandshakes is reached, the oldest
// pending handshake of the source host that holds the most (so one host's
// idle connections cannot lock out the others), counts every refusal by
// reason ([Listener.Stats]) and reports it through [Config.OnViolation];
// [Dial] is the guarded client side. Each [Violation] carries the peer
// address, the reason, the length involved and a capped copy of the
// offending bytes for hex logging, never raw bytes in text.
//
// When MaxConns connections are open, work keeps its place: a connection
// that carried a message within the last minute is never closed for a new
// one while its host holds no more than its fair share; idle and
// never-productive connections go first, whatever host they come from,
// except that a host flooding idle connections never closes a smaller
// host's;
// networks listed in [Config.Reserve] hold their reserved connections
// against everyone; IPv6 sources are grouped into hosts by
// [Config.IPv6HostPrefix]. [Config.MaxConns] states the rule in full, and
// [Stats] counts its evictions by reason.
//
// Every [Config] field's zero value means the default its doc states; a
// constructor fills the defaults first and then verifies the filled values
// ([DefaultConfig] and [Config.Verify] do the same for a caller that wants
// them up front).
//
// Code that must keep an unmodified zmq4.Socket can register a guarded
// transport ([RegisterTransport]) and bind the socket on its scheme
// ("zmqguard://host:port"): the same checks then run under zmq4's socket
// layer. RegisterTransport documents what that mode cannot fix.
//
// Socket types are [SocketType] values, the upper-case names ZMTP sends in
// READY ("PULL", "PUSH", "XPUB", ...); an unknown type is refused with an
// error naming it. A [Conn] offers what a user of one connection needs:
// whole messages in ([Conn.ReadMessage], and [Conn.TryReadMessage] for a
// reader that must not wait) and out ([Conn.WriteMessage],
// [Conn.WriteCommand], which also answers a peer's PING, [Conn.Flush]),
// the peer's validated metadata and ZMTP version
// ([Conn.Peer]), and the connection underneath ([Conn.NetConn]) for
// deadlines and addresses. [Conn.ReadBufferBytes] and [Conn.Stalled] are
// for a receiver that accounts for its memory and judges its peers'
// silence, as zmqguard's socket package does.
//
// zmtpguard's own greeting announces ZMTP 3.1 (RFC 37), where zmq4.Open's
// says 3.0: zmtpguard answers PING and takes SUBSCRIBE/CANCEL commands, and
// a 3.1 greeting is how a zmqguard peer learns that PINGs are welcome.
// Peers at 3.0 (go-zeromq/zmq4 v0.17, which would take a PING for a data
// message) and at 3.1 are both accepted.
//
// Security is NULL, what vLLM uses, or CURVE ([CurveConfig]: encryption and
// client keys admitted by its Authorize function, such as a [KeySet]'s).
package zmtpguard

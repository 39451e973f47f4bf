// Package zmtpaccess gives zmqguard's own packages (socket, the hostile
// corpus, benchmarks and tests) the zmtpguard functions that are not part of
// its public API: a Conn's underlying net.Conn, raw command writes, read
// buffer state, and the wire parsers. Users of zmqguard cannot import it;
// what they need is zmtpguard's exported API.
package zmtpaccess

import (
	"net"

	"github.com/zmqguard/zmqguard/internal/zmtpwire"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// a is set by zmtpguard's init, which runs before this package's variables
// are initialised (zmtpaccess imports zmtpguard).
var a = zmtpwire.GetAccess[*zmtpguard.Conn, *zmtpguard.Message]()

// NetConn returns the connection under c, for deadlines and for tests that
// write raw bytes. Reading or writing it directly corrupts the ZMTP stream.
func NetConn(c *zmtpguard.Conn) net.Conn { return a.NetConn(c) }

// WriteCommand buffers one ZMTP command frame (name and data) on c; Flush
// sends it.
func WriteCommand(c *zmtpguard.Conn, name string, data []byte) error {
	return a.WriteCommand(c, name, data)
}

// MessageBuffered reports whether c's read buffer already holds a whole
// message, so that the next ReadMessage will not wait on the network. It
// never blocks or allocates.
func MessageBuffered(c *zmtpguard.Conn) bool { return a.MessageBuffered(c) }

// TryReadMessage reads c's next message into m when it is whole in the read
// buffer, with ReadMessage's checks; otherwise it consumes nothing and
// reports false without waiting.
func TryReadMessage(c *zmtpguard.Conn, m *zmtpguard.Message) (bool, error) {
	return a.TryReadMessage(c, m)
}

// ReadBufferBytes returns the bytes of read buffers c holds now. Call it
// from the goroutine that reads c.
func ReadBufferBytes(c *zmtpguard.Conn) int { return a.ReadBufferBytes(c) }

// Stalled reports whether c's reader is waiting for its Budget.
func Stalled(c *zmtpguard.Conn) bool { return a.Stalled(c) }

// CheckGreeting validates a prefix of a peer's NULL-mechanism ZMTP 3
// greeting: nil while b is a valid prefix, a *zmtpguard.Violation at the
// first wrong byte.
func CheckGreeting(b []byte) error { return a.CheckGreeting(b) }

// ParseFrameHeader parses the frame header at the start of b, checks the
// size it claims against max and returns that size; ok is false (with a nil
// error) while b does not hold the whole header.
func ParseFrameHeader(b []byte, max int64) (size int64, ok bool, err error) {
	return a.ParseFrameHeader(b, max)
}

// ParseCommand splits a command frame body into its name and data.
func ParseCommand(body []byte) (name, data []byte, err error) { return a.ParseCommand(body) }

// ReadyType validates the property list of a READY command under the
// default limits and returns the peer's Socket-Type.
func ReadyType(props []byte) (string, error) { return a.ReadyType(props) }

package zmtpguard

import (
	"github.com/zmqguard/zmqguard/internal/zmtpwire"
)

// init lends zmqguard's own packages (through internal/zmtpaccess) the
// Conn methods and parsers that are not part of the public API.
func init() {
	zmtpwire.SetAccess(zmtpwire.Access[*Conn, *Message]{
		NetConn:         (*Conn).netConn,
		WriteCommand:    (*Conn).writeCommand,
		MessageBuffered: (*Conn).messageBuffered,
		TryReadMessage:  (*Conn).tryReadMessage,
		ReadBufferBytes: (*Conn).readBufferBytes,
		Stalled:         (*Conn).stalled,
		CheckGreeting:   func(b []byte) error { return checkGreeting(b, nil) },
		ParseFrameHeader: func(b []byte, max int64) (int64, bool, error) {
			h, ok, err := parseFrameHeader(b, max)
			return h.Size, ok, err
		},
		ParseCommand: parseCommand,
		ReadyType: func(props []byte) (string, error) {
			md, err := parseReady(props, "", nil)
			return string(md.SocketType), err
		},
	})
}

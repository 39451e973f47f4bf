package zmtpguard

import (
	"errors"

	"github.com/zmqguard/zmqguard/internal/stack/zmtpwire"
)

// Pong answers a PING message m (as returned by ReadMessage) with the PONG
// ZMTP 3.1 prescribes, echoing the ping's context; it buffers (tests).
func (c *Conn) Pong(m *Message) error {
	if m.Command != cmdPing || len(m.Frames) != 1 {
		return errors.New("zmtpguard: Pong needs a PING message")
	}
	return c.WriteCommand(cmdPong, zmtpwire.PongContext(m.Frames[0]))
}

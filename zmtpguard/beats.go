package zmtpguard

import (
	"github.com/zmqguard/zmqguard/decodeguard"
)

// Heartbeats inside a multipart message.
//
// libzmq puts a PING (or the PONG answering one) between the frames of a
// multipart message it is sending: read in libzmq's source (zeromq/libzmq
// master, commit 6b708e4a, July 2026), stream_engine_base_t::timer_event
// on the heartbeat interval timer sets the engine's next-message producer
// to produce_ping_message and calls out_event, whatever the last frame
// pulled from the session was, and the producer returns to pull_and_encode
// afterwards; zmtp_engine_t::process_heartbeat_message does the same with
// produce_pong_message when a PING arrives. On the receive side,
// decode_and_push hands each command frame to process_command_message as
// it is decoded, inside a message or not, and the message goes on. A PING
// stores its PONG in one slot (_pong_msg), so PINGs arriving before the
// PONG is written get one PONG, for the last of them.
//
// zmtpguard does the same: a PING or PONG command between the frames of a
// multipart message is taken out of the message (it counts toward neither
// MaxFrames nor MaxMessageSize; its size is bounded by the command limit
// before its body is read) and handed to the caller as its own command
// message by the next ReadMessage, right after the data message. Several
// inside one message are coalesced as libzmq does: the last PING, the last
// PONG. Any other command inside a multipart message is still a violation.

// beatCap bounds the data kept of a held PING or PONG: a PING's 2-byte TTL
// and the 16 bytes of context a PONG echoes (RFC 37; libzmq truncates the
// context to 16 bytes too). The rest of a longer one is never used.
const beatCap = 2 + 16

// heldBeats are the heartbeats read inside the current or last multipart
// message, waiting to be returned by ReadMessage.
type heldBeats struct {
	ping, pong       [beatCap]byte
	pingLen, pongLen uint8
	hasPing, hasPong bool
}

// any reports whether a heartbeat is waiting.
func (h *heldBeats) any() bool { return h.hasPing || h.hasPong }

// hold records the command body (name and data) read inside a multipart
// message: a PING or PONG is kept for the next ReadMessage; anything else
// is refused (nframes is the message's frames so far, for the violation).
func (c *Conn) hold(body []byte, nframes int) error {
	name, data, err := parseCommand(body)
	if err != nil {
		return c.fail(err.(*Violation))
	}
	h := &c.beats
	switch string(name) {
	case cmdPing:
		h.pingLen = uint8(copy(h.ping[:], data))
		h.hasPing = true
		return nil
	case cmdPong:
		h.pongLen = uint8(copy(h.pong[:], data))
		h.hasPong = true
		return nil
	}
	return c.fail(violation(decodeguard.ReasonTransport,
		"command frame inside a multipart message ("+quoteName(name)+"; only PING and PONG may come between frames)", int64(nframes), body))
}

// takeBeat fills m with a held heartbeat (PING first) and reports whether
// there was one.
func (c *Conn) takeBeat(m *Message) bool {
	h := &c.beats
	var data []byte
	switch {
	case h.hasPing:
		h.hasPing = false
		m.Command = cmdPing
		data = h.ping[:h.pingLen]
	case h.hasPong:
		h.hasPong = false
		m.Command = cmdPong
		data = h.pong[:h.pongLen]
	default:
		return false
	}
	m.buf = append(m.buf[:0], data...)
	m.ends = append(m.ends[:0], len(m.buf))
	m.Frames = append(m.Frames[:0], m.buf[:len(m.buf):len(m.buf)])
	return true
}

// commandLimit bounds a command frame that is not the handshake's: the
// handshake limit, and never more than a message.
func commandLimit(cfg *Config) int64 {
	return min(int64(cfg.MaxHandshakeSize), cfg.MaxMessageSize)
}

// quoteName renders a command name for a violation, bounded and printable.
func quoteName(name []byte) string {
	if len(name) > 32 {
		name = name[:32]
	}
	out := make([]byte, 0, len(name)+2)
	out = append(out, '"')
	for _, b := range name {
		if b < 0x20 || b > 0x7e || b == '"' {
			b = '?'
		}
		out = append(out, b)
	}
	return string(append(out, '"'))
}

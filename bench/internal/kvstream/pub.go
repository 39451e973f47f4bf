package kvstream

import (
	"context"
	"encoding/binary"

	"github.com/zmqguard/zmqguard/socket"
)

// Bind binds n XPUB sockets with opts on 127.0.0.1, each at a port the
// kernel picks, and returns them with their endpoints. Each socket's
// subscriptions are read (and dropped) until ctx ends or it closes; the
// caller closes the sockets.
func Bind(ctx context.Context, n int, opts socket.Options) ([]*socket.Socket, []string, error) {
	socks := make([]*socket.Socket, 0, n)
	eps := make([]string, 0, n)
	for range n {
		s, err := socket.New("XPUB", opts)
		if err == nil {
			if err = s.Bind("tcp://127.0.0.1:0"); err != nil {
				s.Close()
			}
		}
		if err != nil {
			for _, o := range socks {
				o.Close()
			}
			return nil, nil, err
		}
		go func() {
			for {
				if _, err := s.Recv(ctx); err != nil {
					return
				}
			}
		}()
		socks = append(socks, s)
		eps = append(eps, s.Endpoint())
	}
	return socks, eps, nil
}

// Engine is one publisher's live stream: its socket, its topic and its
// next sequence number. One goroutine at a time sends on it.
type Engine struct {
	Sock  *socket.Socket
	Topic []byte
	seq   uint64
	seqb  [8]byte
}

// Send publishes payload as vLLM does, [topic, seq (8 bytes big-endian),
// payload], numbering the engine's messages 0, 1, 2, ...
func (e *Engine) Send(ctx context.Context, payload []byte) error {
	binary.BigEndian.PutUint64(e.seqb[:], e.seq)
	e.seq++
	return e.Sock.Send(ctx, e.Topic, e.seqb[:], payload)
}

package zmtpguard

import (
	"io"
	"slices"
	"sync"
)

// A frame body over bigBody is read into pooled chunks as its bytes
// arrive and copied once, when complete, into the message's buffer grown
// to its exact size. Grown by append as it arrived instead, a 7.5 MB body
// allocated 40.3 MB of fresh buffers on the way (one 7.5 MB allocation now,
// the chunks being recycled; measured with runtime.MemStats around
// ReadMessage), each zeroed and faulted in, the earlier ones left to the
// collector: with six engines sending such messages at once (issue 37) the
// readers' growth was a quarter of the receiver's CPU in their first burst
// while the other engines' messages waited for a CPU. Memory still follows
// the bytes received, not what the header claims: a chunk is taken only
// for bytes the peer has sent (each step charged to the budget first, as
// in readBody), and the final buffer is allocated once they all arrived.
const (
	bigBody   = 1 << 20
	bodyChunk = 1 << 20
)

// chunks recycles body chunks among all connections.
var chunks = sync.Pool{New: func() any { return new([bodyChunk]byte) }}

// readBigBody reads a body of n bytes (over bigBody) and appends it to
// m.buf.
func (c *Conn) readBigBody(m *Message, n int64) error {
	var held []*[bodyChunk]byte
	defer func() {
		for _, ch := range held {
			chunks.Put(ch)
		}
	}()
	start := len(m.buf)
	var got int64
	for got < n {
		step := min(n-got, readChunk)
		if err := c.bodyReserve(start+int(got), int(step)); err != nil {
			return err
		}
		for step > 0 {
			off := int(got % bodyChunk)
			if off == 0 {
				held = append(held, chunks.Get().(*[bodyChunk]byte))
			}
			k := min(step, int64(bodyChunk-off))
			if _, err := io.ReadFull(c.br, held[len(held)-1][off:off+int(k)]); err != nil {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return err
			}
			got += k
			step -= k
		}
	}
	m.buf = slices.Grow(m.buf, int(n))
	for i, ch := range held {
		k := min(n-int64(i)*bodyChunk, bodyChunk)
		m.buf = append(m.buf, ch[:k]...)
	}
	return nil
}

package zmtpguard

import (
	"bufio"
	"encoding/binary"
	"slices"
	"testing"
)

// The walkers over buffered bytes decoded frame headers by hand until
// issue 40 (readBuffered, bufferedExtent and messageBuffered here, the zmq4
// output tracker in transportconn.go, curveMessageBuffered in
// curve_conn.go); they now all use zmtpwire.PeekFrameHeader. The old code
// paths are kept below, verbatim but for being functions of the buffered
// bytes, as the reference of FuzzWalkersMatchOld.

// oldReadBuffered is readBuffered before issue 40: the frames of the whole
// data message at the front of b, and whether there is one.
func oldReadBuffered(b []byte, maxFrames int, maxMsg int64) ([][]byte, bool) {
	off := 0
	var total uint64
	var frames [][]byte
	for nframes := 0; ; nframes++ {
		if len(b)-off < 2 || nframes >= maxFrames {
			break
		}
		flags := b[off]
		var size uint64
		hl := 2
		switch flags &^ flagMore {
		case 0:
			size = uint64(b[off+1])
		case flagLong:
			hl = 9
			if len(b)-off < hl {
				break
			}
			size = binary.BigEndian.Uint64(b[off+1:])
		default:
			hl = 0
		}
		if hl == 0 || len(b)-off < hl || size > uint64(maxMsg)-total || size > uint64(len(b)-off-hl) {
			break
		}
		if nframes == 0 && flags&flagMore != 0 {
			if _, _, ok := oldBufferedExtent(b, maxFrames, maxMsg); !ok {
				break
			}
		}
		off += hl
		frames = append(frames, b[off:off+int(size)])
		off += int(size)
		total += size
		if flags&flagMore == 0 {
			return frames, true
		}
	}
	return nil, false
}

// oldBufferedExtent is bufferedExtent before issue 40.
func oldBufferedExtent(b []byte, maxFrames int, maxMsg int64) (frames, bytes int, ok bool) {
	var total uint64
	off := 0
	for n := 0; n < maxFrames; n++ {
		if len(b)-off < 2 {
			return 0, 0, false
		}
		flags := b[off]
		var size uint64
		hl := 2
		switch flags &^ flagMore {
		case 0:
			size = uint64(b[off+1])
		case flagLong:
			hl = 9
			if len(b)-off < hl {
				return 0, 0, false
			}
			size = binary.BigEndian.Uint64(b[off+1:])
		default:
			return 0, 0, false
		}
		if size > uint64(maxMsg)-total || size > uint64(len(b)-off-hl) {
			return 0, 0, false
		}
		off += hl + int(size)
		total += size
		if flags&flagMore == 0 {
			return n + 1, int(total), true
		}
	}
	return 0, 0, false
}

// oldMessageBuffered is messageBuffered (NULL) before issue 40.
func oldMessageBuffered(b []byte) bool {
	for off := 0; off < len(b); {
		hl := headerLen(b[off])
		if len(b)-off < hl {
			return false
		}
		flags := b[off]
		var size uint64
		if hl == 2 {
			size = uint64(b[off+1])
		} else {
			size = uint64(b[off+1])<<56 | uint64(b[off+2])<<48 | uint64(b[off+3])<<40 | uint64(b[off+4])<<32 |
				uint64(b[off+5])<<24 | uint64(b[off+6])<<16 | uint64(b[off+7])<<8 | uint64(b[off+8])
		}
		if size > uint64(len(b)-off-hl) {
			return false
		}
		off += hl + int(size)
		if flags&flagMore == 0 || flags&flagCommand != 0 {
			return true
		}
	}
	return false
}

// withoutInnerCommands is b without the whole command frames that come
// between the frames of a multipart message, decoded by hand as the old
// walkers did; from the first frame not wholly present on, b is kept as it
// is. Since heartbeats inside a multipart message are taken out of it
// (beats.go), messageBuffered on b must answer what the old walker answers
// on these bytes.
func withoutInnerCommands(b []byte) []byte {
	var out []byte
	inside := false
	off := 0
	for off < len(b) {
		hl := headerLen(b[off])
		if len(b)-off < hl {
			break
		}
		var size uint64
		if hl == 2 {
			size = uint64(b[off+1])
		} else {
			size = binary.BigEndian.Uint64(b[off+1:])
		}
		if size > uint64(len(b)-off-hl) {
			break
		}
		end := off + hl + int(size)
		cmd := b[off]&flagCommand != 0
		if !(cmd && inside) {
			out = append(out, b[off:end]...)
			inside = !cmd && b[off]&flagMore != 0
		}
		off = end
	}
	return append(out, b[off:]...)
}

// oldOutTracker is outTracker before issue 40.
type oldOutTracker struct {
	hdr    [9]byte
	hn     int
	remain int64
	more   bool
}

func (o *oldOutTracker) track(b []byte) {
	for len(b) > 0 {
		if o.remain > 0 {
			n := min(int64(len(b)), o.remain)
			o.remain -= n
			b = b[n:]
			continue
		}
		if o.hn == 0 {
			o.hdr[0] = b[0]
			o.hn = 1
			b = b[1:]
		}
		need := headerLen(o.hdr[0])
		k := copy(o.hdr[o.hn:need], b)
		o.hn += k
		b = b[k:]
		if o.hn < need {
			return
		}
		if need == 2 {
			o.remain = int64(o.hdr[1])
		} else {
			o.remain = int64(uint64(o.hdr[1])<<56 | uint64(o.hdr[2])<<48 | uint64(o.hdr[3])<<40 | uint64(o.hdr[4])<<32 |
				uint64(o.hdr[5])<<24 | uint64(o.hdr[6])<<16 | uint64(o.hdr[7])<<8 | uint64(o.hdr[8]))
		}
		o.more = o.hdr[0]&flagMore != 0
		o.hn = 0
	}
}

// FuzzWalkersMatchOld is the differential check of the walkers against
// the hand-written decoders they replaced: on any buffered bytes, under
// any limits, readBuffered returns the same frames (or declines the same
// way), bufferedExtent and messageBuffered the same answers, and the zmq4
// output tracker, fed the bytes in chunks, the same state after each.
func FuzzWalkersMatchOld(f *testing.F) {
	for _, s := range streamSeeds() {
		f.Add(s, uint16(300), uint8(4), uint8(3))
	}
	f.Add(slices.Concat(dataFrame(true, []byte("ab")), longHeader(0, 5), []byte("hello")), uint16(1000), uint8(4), uint8(1))
	f.Add(slices.Concat(longHeader(flagMore, 1<<40), []byte("x")), uint16(1000), uint8(4), uint8(7))
	f.Add([]byte{flagCommand, 4, 'P', 'I', 'N', 'G', 0, 0}, uint16(10), uint8(1), uint8(2))
	// Heartbeats (and a READY) between the frames of a multipart message.
	for _, s := range innerCommandSeeds() {
		f.Add(s, uint16(300), uint8(4), uint8(3))
	}
	f.Fuzz(func(t *testing.T, data []byte, maxSize uint16, maxFrames uint8, chunk uint8) {
		if len(data) > 8<<10 {
			data = data[:8<<10]
		}
		cfg := Config{MaxMessageSize: int64(maxSize) + 1, MaxFrames: int(maxFrames)%16 + 1}.withDefaults()
		nc := newBytesConn(data)
		c := &Conn{nc: nc, br: bufio.NewReaderSize(nc, 16<<10), cfg: cfg, local: "PULL"}
		b, _ := c.br.Peek(len(data))
		b = slices.Clone(b)

		if got, want := c.messageBuffered(), oldMessageBuffered(withoutInnerCommands(b)); got != want {
			t.Fatalf("messageBuffered %v, old %v (on the bytes without commands inside a message) on % x", got, want, b)
		}
		fr, by, ok := c.bufferedExtent(b)
		ofr, oby, ook := oldBufferedExtent(b, cfg.MaxFrames, cfg.MaxMessageSize)
		if fr != ofr || by != oby || ok != ook {
			t.Fatalf("bufferedExtent %d %d %v, old %d %d %v on % x", fr, by, ok, ofr, oby, ook, b)
		}
		var m Message
		whole := c.readBuffered(&m)
		oframes, owhole := oldReadBuffered(b, cfg.MaxFrames, cfg.MaxMessageSize)
		if whole != owhole || !slices.EqualFunc(m.Frames, oframes, func(x, y []byte) bool { return string(x) == string(y) }) {
			t.Fatalf("readBuffered %v %q, old %v %q on % x", whole, m.Frames, owhole, oframes, b)
		}

		var o outTracker
		var old oldOutTracker
		step := int(chunk)%16 + 1
		for rest := b; len(rest) > 0; {
			n := min(step, len(rest))
			o.track(rest[:n])
			old.track(rest[:n])
			rest = rest[n:]
			if o.hn != old.hn || o.remain != old.remain || o.more != old.more || o.atBoundary() != (old.hn == 0 && old.remain == 0 && !old.more) {
				t.Fatalf("outTracker %+v, old %+v on % x in steps of %d", o, old, b, step)
			}
		}
	})
}

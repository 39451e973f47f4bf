package socket

// outMsg is one queued message: its frames concatenated in buf, frame i
// ending at ends[i], then last when it is not nil (a frame shared by
// reference: Socket.SendShared). cmd, when set, makes it a ZMTP command
// (buf its data).
type outMsg struct {
	buf  []byte
	ends []int
	last []byte
	cmd  string
}

// set copies [prefix,] frames into m; with share the last frame is kept by
// reference instead (it must not be empty).
func (m *outMsg) set(prefix []byte, hasPrefix bool, frames [][]byte, share bool) {
	m.cmd = ""
	m.buf = m.buf[:0]
	m.ends = m.ends[:0]
	m.last = nil
	if share {
		m.last = frames[len(frames)-1]
		frames = frames[:len(frames)-1]
	}
	// Size the slot once for the whole message: a fresh slot (or one whose
	// oversized buffer was released) then costs one allocation per table
	// rather than one per growth step; a reused slot costs none.
	size := len(prefix)
	for _, f := range frames {
		size += len(f)
	}
	if cap(m.buf) < size {
		m.buf = make([]byte, 0, (size+63)&^63)
	}
	if n := len(frames) + 1; cap(m.ends) < n {
		m.ends = make([]int, 0, max(n, 4))
	}
	if hasPrefix {
		m.buf = append(m.buf, prefix...)
		m.ends = append(m.ends, len(m.buf))
	}
	for _, f := range frames {
		m.buf = append(m.buf, f...)
		m.ends = append(m.ends, len(m.buf))
	}
}

func (m *outMsg) frames(dst [][]byte) [][]byte {
	dst = dst[:0]
	start := 0
	for _, e := range m.ends {
		dst = append(dst, m.buf[start:e:e])
		start = e
	}
	if m.last != nil {
		dst = append(dst, m.last)
	}
	return dst
}

package ratelog

import (
	"log/slog"
	"strconv"
)

// RenderPrefix is how many leading bytes of peer bytes [Render] and
// [AppendRender] show, as hex.
const RenderPrefix = 64

const hexDigits = "0123456789abcdef"

// maxRendered is the longest output of AppendRender:
// "len=" + 20 digits + " hex=" + 2*RenderPrefix + "…".
const maxRendered = len("len=") + 20 + len(" hex=") + 2*RenderPrefix + len("…")

// Escape returns s with every byte outside printable ASCII escaped as
// \xNN, cut to at most limit bytes followed by "…" when longer. It is the
// one escaper for text that may carry peer bytes (a decoder's error, a
// panic value, a peer-supplied name, a topic, a key) before it reaches a
// log line or an error string: nothing in the result can drive a terminal.
func Escape(s string, limit int) string {
	clean := len(s) <= limit
	for i := 0; clean && i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			clean = false
		}
	}
	if clean {
		return s
	}
	out := make([]byte, 0, max(limit, 0)+len("…"))
	for i := 0; i < len(s); i++ {
		c := s[i]
		w := 1
		if c < 0x20 || c > 0x7e {
			w = 4
		}
		if len(out)+w > limit {
			return string(append(out, "…"...))
		}
		if w == 1 {
			out = append(out, c)
		} else {
			out = append(out, '\\', 'x', hexDigits[c>>4], hexDigits[c&0xf])
		}
	}
	return string(out)
}

// PrefixHex returns the hex of b's first n bytes, followed by "…" when b is
// longer: the value of a [KeyPrefixHex] attribute.
func PrefixHex(b []byte, n int) string {
	return string(AppendPrefixHex(make([]byte, 0, 2*min(len(b), max(n, 0))+len("…")), b, n))
}

// AppendPrefixHex appends [PrefixHex]'s text to dst.
func AppendPrefixHex(dst, b []byte, n int) []byte {
	p := b
	if len(p) > n {
		p = p[:max(n, 0)]
	}
	for _, c := range p {
		dst = append(dst, hexDigits[c>>4], hexDigits[c&0xf])
	}
	if len(b) > len(p) {
		dst = append(dst, "…"...)
	}
	return dst
}

// Render describes raw peer bytes safely for an error string or a log
// line: the length and a hex prefix of at most [RenderPrefix] bytes,
// followed by "…" when cut, as in
//
//	len=1234 hex=a3e08080…
//
// The output only ever contains ASCII letters, digits, '=', ' ' and "…", so
// terminal escape sequences or other control bytes in b never reach a log.
func Render(b []byte) string {
	var buf [maxRendered]byte
	return string(AppendRender(buf[:0], b))
}

// AppendRender appends [Render]'s text for b to dst and returns the extended
// buffer; it does not allocate when dst has room for the text (at most 159
// bytes).
func AppendRender(dst, b []byte) []byte {
	dst = append(dst, "len="...)
	dst = strconv.AppendInt(dst, int64(len(b)), 10)
	dst = append(dst, " hex="...)
	return AppendPrefixHex(dst, b, RenderPrefix)
}

// Hex is raw peer bytes to be logged safely. It renders as [Render] does
// through fmt (String) and, lazily, through log/slog (LogValue, a group of
// "len" and "hex"): nothing is formatted for a record whose level is
// disabled.
type Hex []byte

// String implements fmt.Stringer with [Render].
func (h Hex) String() string { return Render(h) }

// LogValue implements slog.LogValuer: a group {len: int, hex: capped hex
// prefix}.
func (h Hex) LogValue() slog.Value {
	var buf [2*RenderPrefix + len("…")]byte
	return slog.GroupValue(
		slog.Int("len", len(h)),
		slog.String("hex", string(AppendPrefixHex(buf[:0], h, RenderPrefix))),
	)
}

package decodeguard

import (
	"log/slog"
	"strconv"
)

// RenderPrefix is how many leading bytes of a frame [Render], [AppendRender]
// and [Hex] show, as hex.
const RenderPrefix = 64

const hexDigits = "0123456789abcdef"

// maxRendered is the longest output of AppendRender:
// "len=" + 20 digits + " hex=" + 2*RenderPrefix + "…".
const maxRendered = len("len=") + 20 + len(" hex=") + 2*RenderPrefix + len("…")

// Render describes raw peer bytes safely for a log line or an error string:
// the length and a hex prefix of at most [RenderPrefix] bytes, followed by
// "…" when cut, as in
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
	return appendHexPrefix(dst, b)
}

func appendHexPrefix(dst, b []byte) []byte {
	p := b
	if len(p) > RenderPrefix {
		p = p[:RenderPrefix]
	}
	for _, c := range p {
		dst = append(dst, hexDigits[c>>4], hexDigits[c&0xf])
	}
	if len(b) > RenderPrefix {
		dst = append(dst, "…"...)
	}
	return dst
}

// Hex is raw peer bytes to be logged safely. It renders as [Render] does
// through fmt (String) and, lazily, through log/slog (LogValue, a group of
// "len" and "hex"): nothing is formatted for a record whose level is
// disabled. The only cost then is boxing the slice header into an interface,
// one small allocation.
//
//	logger.Debug("dropped frame", "frame", decodeguard.Hex(b))
type Hex []byte

// String implements fmt.Stringer with [Render].
func (h Hex) String() string { return Render(h) }

// LogValue implements slog.LogValuer: a group {len: int, hex: capped hex
// prefix}.
func (h Hex) LogValue() slog.Value {
	var buf [2*RenderPrefix + len("…")]byte
	return slog.GroupValue(
		slog.Int("len", len(h)),
		slog.String("hex", string(appendHexPrefix(buf[:0], h))),
	)
}

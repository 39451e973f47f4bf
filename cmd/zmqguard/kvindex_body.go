package main

// A streaming decoder of kv-index's POST /score body (issue 37).
//
// encoding/json's Decoder holds the whole value in a buffer that grows by
// doubling, and the []int64 it decodes tokens into grows by append: 75 MB
// allocated for an 8 MiB body of a million tokens (BenchmarkScoreBodyDecode).
// decodeScoreBody reads the body through a fixed buffer and parses the
// token ids straight into pooled fixed-size chunks, then allocates the
// tokens once at their count (kvindex_body_tokens.go). The other fields'
// values are collected raw (a long one in pooled chunks, copied once at
// its length) and handed to json.Unmarshal, or, for a long string with no
// escapes, made a string straight from the chunks.
//
// It accepts what the old path (json.Decoder with DisallowUnknownFields,
// then a More check, into kvScoreRequest) accepted, with the same values:
// keys matched as encoding/json matches them (exact name, else
// bytes.EqualFold), the last of a repeated key winning (and, as
// encoding/json does, a repeated array filling the slice the earlier one
// left: a null element keeps the value an earlier array put there), null
// for a field meaning what it means there, and after the value anything
// that More would not call another value. Differences (all refusals of
// bodies encoding/json would also refuse, or would accept only in the
// cases named):
//   - An error is reported where it is found, before the rest of the body
//     is read: a body over the cap whose first error comes before the cap
//     is a 400 naming it, where encoding/json read to the cap first (413).
//   - A tokens array is refused as soon as it passes the token limit, even
//     when a later "tokens" key would have replaced it with a shorter one
//     (encoding/json decoded both and kept the last).
//   - A key of over scoreMaxKey bytes is refused as unknown without
//     reading it to its end (no key of kvScoreRequest is that long, in any
//     spelling encoding/json matches).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode/utf8"
)

const (
	// scoreReadBuf is the size of the buffer the body is read through.
	scoreReadBuf = 32 << 10
	// scoreFirstChunk tokens are parsed into the decoder's own array;
	// more go to pooled chunks of scoreChunk tokens (512 KiB).
	scoreFirstChunk = 1 << 10
	scoreChunk      = 64 << 10
	// scoreMaxKey bounds a key's raw bytes, quotes included: the longest
	// spelling of "block_size" that encoding/json matches is ten \uXXXX
	// escapes (62 bytes).
	scoreMaxKey = 64
	// scoreMaxNumber bounds block_size's raw bytes: no int is longer than
	// "-9223372036854775808".
	scoreMaxNumber = 20
	// scoreKeepRaw: a raw-value scratch grown past it is not kept with a
	// pooled decoder.
	scoreKeepRaw = 64 << 10
)

var (
	scoreChunks   = sync.Pool{New: func() any { c := make([]int64, scoreChunk); return &c }}
	scoreDecoders = sync.Pool{New: func() any { return &scoreBodyDecoder{buf: make([]byte, scoreReadBuf)} }}
)

// scoreBodyError is a body refused at offset Off (bytes from its start).
type scoreBodyError struct {
	Off int64
	Msg string
}

func (e *scoreBodyError) Error() string { return fmt.Sprintf("%s (at offset %d)", e.Msg, e.Off) }

// scoreTooManyTokens is a tokens array refused when it passed Max.
type scoreTooManyTokens struct {
	Max int
	Off int64
}

func (e *scoreTooManyTokens) Error() string {
	return fmt.Sprintf("over %d tokens (token %d at offset %d)", e.Max, e.Max+1, e.Off)
}

type scoreBodyDecoder struct {
	src      io.Reader
	buf      []byte
	pos, end int
	base     int64 // offset of buf[0] in the body
	rerr     error // the reader's error, once it returned one
	max      int   // tokens at most
	req      kvScoreRequest
	hist     []int64 // what the last tokens array left in its slice (see tokens)
	first    [scoreFirstChunk]int64
	chunks   []*[]int64
	raw      []byte
	peak     int // bytes of pooled chunks held at most during one decode
	// A long value's raw bytes past rawInline go to pooled chunks
	// (spilled; only while spill is set), so that it is copied once, at
	// its length, when whole.
	spill     bool
	rawInline int
	rawSpill  []*[]byte
	rawLen    int  // bytes in d.raw and rawSpill
	escapes   bool // the value's strings hold escapes
}

// decodeScoreBody decodes a POST /score body from r, at most maxTokens
// token ids. Read errors come back as the reader returned them (an
// *http.MaxBytesError for a body over the cap), io.EOF for a body with no
// value, io.ErrUnexpectedEOF for one that ends inside it; a body refused
// is a *scoreBodyError or a *scoreTooManyTokens.
func decodeScoreBody(r io.Reader, maxTokens int) (kvScoreRequest, error) {
	req, _, err := decodeScoreBodyPeak(r, maxTokens)
	return req, err
}

// decodeScoreBodyPeak is decodeScoreBody that also returns the bytes of
// pooled chunks the decode held at most (for BenchmarkScoreBodyDecode).
func decodeScoreBodyPeak(r io.Reader, maxTokens int) (kvScoreRequest, int, error) {
	return decodeScoreBodyInline(r, maxTokens, scoreKeepRaw)
}

// decodeScoreBodyInline is decodeScoreBodyPeak spilling a value's raw
// bytes to chunks past inline bytes (tests lower it).
func decodeScoreBodyInline(r io.Reader, maxTokens, inline int) (kvScoreRequest, int, error) {
	d := scoreDecoders.Get().(*scoreBodyDecoder)
	d.src, d.max, d.rawInline = r, maxTokens, inline
	err := d.body()
	d.putRaw()
	req, peak := d.req, d.peak
	d.src, d.pos, d.end, d.base, d.rerr, d.req, d.hist, d.peak = nil, 0, 0, 0, nil, kvScoreRequest{}, nil, 0
	if cap(d.raw) > scoreKeepRaw {
		d.raw = nil
	}
	scoreDecoders.Put(d)
	if err != nil {
		return kvScoreRequest{}, peak, err
	}
	return req, peak, nil
}

func (d *scoreBodyDecoder) off() int64 { return d.base + int64(d.pos) }

func (d *scoreBodyDecoder) fail(format string, a ...any) error {
	return &scoreBodyError{Off: d.off(), Msg: fmt.Sprintf(format, a...)}
}

// fill reads more of the body once buf is used up; false when there is no
// more (d.rerr says why).
func (d *scoreBodyDecoder) fill() bool {
	if d.rerr != nil {
		return false
	}
	d.base += int64(d.end)
	d.pos, d.end = 0, 0
	for range 100 {
		n, err := d.src.Read(d.buf)
		d.end = n
		if err != nil {
			d.rerr = err
			return n > 0
		}
		if n > 0 {
			return true
		}
	}
	d.rerr = io.ErrNoProgress
	return false
}

// more reports whether a byte is there to read (reading more when needed).
func (d *scoreBodyDecoder) more() bool { return d.pos < d.end || d.fill() }

// endErr is the error of a body that ended (or failed) inside a value.
func (d *scoreBodyDecoder) endErr() error {
	if d.rerr == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return d.rerr
}

// skipSpace skips JSON whitespace; false at the end of the body.
func (d *scoreBodyDecoder) skipSpace() bool {
	for d.more() {
		for ; d.pos < d.end; d.pos++ {
			switch d.buf[d.pos] {
			case ' ', '\t', '\n', '\r':
			default:
				return true
			}
		}
	}
	return false
}

// peek returns the next byte that is not whitespace, without taking it.
func (d *scoreBodyDecoder) peek() (byte, error) {
	if !d.skipSpace() {
		return 0, d.endErr()
	}
	return d.buf[d.pos], nil
}

// literal takes the literal word (true, false or null) from the body.
func (d *scoreBodyDecoder) literal(word string) error {
	for i := 0; i < len(word); i++ {
		if !d.more() {
			return d.endErr()
		}
		if d.buf[d.pos] != word[i] {
			return d.fail("invalid character %q in literal %s", d.buf[d.pos], word)
		}
		d.pos++
	}
	return nil
}

// body decodes the value and checks what follows it.
func (d *scoreBodyDecoder) body() error {
	if !d.skipSpace() {
		if d.rerr == io.EOF {
			return io.EOF
		}
		return d.rerr
	}
	switch c := d.buf[d.pos]; c {
	case '{':
		if err := d.object(); err != nil {
			return err
		}
	case 'n': // null decodes to nothing
		if err := d.literal("null"); err != nil {
			return err
		}
	default:
		return d.fail("%s where the request object was expected", valueWord(c))
	}
	// As json.Decoder.More: nothing, a read error, '}' or ']' next is no
	// second value.
	if d.skipSpace() {
		if c := d.buf[d.pos]; c != '}' && c != ']' {
			return d.fail("more than one value")
		}
	}
	return nil
}

// valueWord names the kind of value starting with c.
func valueWord(c byte) string {
	switch {
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == '"':
		return "a string"
	case c == '-' || c >= '0' && c <= '9':
		return "a number"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == 'n':
		return "null"
	}
	return fmt.Sprintf("invalid character %q", c)
}

// scoreFields are kvScoreRequest's JSON keys.
var scoreFields = [...]string{"tokens", "lora", "model", "block_size", "engines"}

func (d *scoreBodyDecoder) object() error {
	d.pos++ // '{'
	c, err := d.peek()
	if err != nil {
		return err
	}
	if c == '}' {
		d.pos++
		return nil
	}
	for {
		if c != '"' {
			return d.fail("%s where a key was expected", valueWord(c))
		}
		keyOff := d.off()
		field, err := d.key()
		if err != nil {
			return err
		}
		if !isScoreField(field) {
			return &scoreBodyError{Off: keyOff, Msg: "unknown field " + field}
		}
		if c, err = d.peek(); err != nil {
			return err
		}
		if c != ':' {
			return d.fail("invalid character %q after a key", c)
		}
		d.pos++
		if _, err = d.peek(); err != nil {
			return err
		}
		switch field {
		case "tokens":
			err = d.tokens()
		case "lora":
			err = d.short(field, "\"n", &d.req.Lora)
		case "model":
			err = d.short(field, "\"n", &d.req.Model)
		case "block_size":
			err = d.short(field, "-0123456789n", &d.req.BlockSize)
		case "engines":
			err = d.short(field, "[n", &d.req.Engines)
		}
		if err != nil {
			return err
		}
		if c, err = d.peek(); err != nil {
			return err
		}
		d.pos++
		switch c {
		case '}':
			return nil
		case ',':
		default:
			return d.fail("invalid character %q after an object value", c)
		}
		if c, err = d.peek(); err != nil {
			return err
		}
	}
}

// key reads a key and returns the field it names (as encoding/json
// matches it), else the key quoted (for the unknown-field error).
func (d *scoreBodyDecoder) key() (string, error) {
	d.putRaw()
	if err := d.rawString(scoreMaxKey); err != nil {
		return "", err
	}
	if len(d.raw) > scoreMaxKey {
		return fmt.Sprintf("(a key of over %d bytes)", scoreMaxKey-2), nil
	}
	k := d.raw[1 : len(d.raw)-1]
	if bytes.IndexByte(k, '\\') >= 0 || !isASCII(k) {
		var s string
		if err := json.Unmarshal(d.raw, &s); err != nil {
			return "", d.fail("key %q: %v", d.raw, err)
		}
		k = []byte(s)
	}
	for _, f := range scoreFields {
		if bytes.EqualFold(k, []byte(f)) {
			return f, nil
		}
	}
	return fmt.Sprintf("%q", k), nil
}

func isScoreField(f string) bool {
	for _, g := range scoreFields {
		if f == g {
			return true
		}
	}
	return false
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

// rawString appends the string at the read position, quotes included, to
// d.raw, stopping once d.raw holds more than limit bytes (0: no limit).
// Escapes are left to json.Unmarshal to check; control characters are
// refused here.
func (d *scoreBodyDecoder) rawString(limit int) error {
	d.appendRawByte('"')
	d.pos++
	escaped := false
	for {
		if !d.more() {
			return d.endErr()
		}
		start := d.pos
		for ; d.pos < d.end; d.pos++ {
			c := d.buf[d.pos]
			switch {
			case c < 0x20:
				d.appendRaw(d.buf[start:d.pos])
				return d.fail("invalid character %q in string literal", c)
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
				d.escapes = true
			case c == '"':
				d.pos++
				d.appendRaw(d.buf[start:d.pos])
				return nil
			}
			if limit > 0 && len(d.raw)+d.pos+1-start > limit {
				d.pos++
				d.appendRaw(d.buf[start:d.pos])
				return nil
			}
		}
		d.appendRaw(d.buf[start:d.pos])
	}
}

// scoreRawChunk is the size of a pooled chunk of a long value's bytes.
const scoreRawChunk = 256 << 10

var scoreRawChunks = sync.Pool{New: func() any { b := make([]byte, 0, scoreRawChunk); return &b }}

// appendRaw appends b to the raw value: to d.raw, or past d.rawInline
// bytes (while d.spill is set) to pooled chunks.
func (d *scoreBodyDecoder) appendRaw(b []byte) {
	d.rawLen += len(b)
	if len(d.rawSpill) == 0 && (!d.spill || len(d.raw)+len(b) <= d.rawInline) {
		d.raw = append(d.raw, b...)
		return
	}
	for len(b) > 0 {
		if len(d.rawSpill) == 0 || len(*d.rawSpill[len(d.rawSpill)-1]) == scoreRawChunk {
			c := scoreRawChunks.Get().(*[]byte)
			*c = (*c)[:0]
			d.rawSpill = append(d.rawSpill, c)
			d.peak = max(d.peak, len(d.rawSpill)*scoreRawChunk)
		}
		c := d.rawSpill[len(d.rawSpill)-1]
		n := min(len(b), scoreRawChunk-len(*c))
		*c = append(*c, b[:n]...)
		b = b[n:]
	}
}

func (d *scoreBodyDecoder) appendRawByte(c byte) { d.appendRaw([]byte{c}) }

// putRaw gives the raw value's chunks back and starts a new value.
func (d *scoreBodyDecoder) putRaw() {
	for i, c := range d.rawSpill {
		scoreRawChunks.Put(c)
		d.rawSpill[i] = nil
	}
	d.rawSpill, d.raw, d.rawLen, d.escapes, d.spill = d.rawSpill[:0], d.raw[:0], 0, false, false
}

// spilled returns the raw value whole (copied once, at its length, when
// it spilled), and a string of a lone string value with no escapes in
// valid UTF-8 (its bytes, as encoding/json decodes it), built straight
// from the chunks.
func (d *scoreBodyDecoder) spilled() ([]byte, *string) {
	if len(d.rawSpill) == 0 {
		return d.raw, nil
	}
	if d.raw[0] == '"' && !d.escapes {
		var sb strings.Builder
		sb.Grow(d.rawLen - 1)
		sb.Write(d.raw[1:])
		for _, c := range d.rawSpill {
			sb.Write(*c)
		}
		if s := sb.String(); utf8.ValidString(s[:len(s)-1]) {
			s = s[:len(s)-1]
			return nil, &s
		}
	}
	raw := make([]byte, 0, d.rawLen)
	raw = append(raw, d.raw...)
	for _, c := range d.rawSpill {
		raw = append(raw, *c...)
	}
	return raw, nil
}

// short decodes a field other than tokens: its raw value, which must start
// with one of the bytes in starts, is collected and handed to
// json.Unmarshal with the field (so null and repeated keys mean what they
// meant).
func (d *scoreBodyDecoder) short(field, starts string, v any) error {
	off := d.off()
	d.putRaw()
	defer d.putRaw()
	d.spill = true
	c := d.buf[d.pos]
	if strings.IndexByte(starts, c) < 0 {
		return d.fail("%s: %s is not a %s", field, valueWord(c), fieldKind(field))
	}
	var err error
	switch c {
	case 'n':
		err = d.literal("null")
		d.appendRaw([]byte("null"))
	case '"':
		err = d.rawString(0)
	case '[':
		var n int
		n, err = d.rawStrings(field)
		if e, ok := v.(*[]string); ok && *e == nil && n > 0 {
			// Sized at the count (encoding/json grows a fresh slice by
			// append, and fills a given one as it does a fresh one: null
			// elements stay ""). A repeated key's slice is left as it is.
			*e = make([]string, 0, n)
		}
	default:
		err = d.rawNumber(field)
	}
	if err != nil {
		return err
	}
	raw, str := d.spilled()
	if str != nil {
		switch v := v.(type) {
		case *string:
			*v = *str
			return nil
		case **string:
			*v = str
			return nil
		}
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return &scoreBodyError{Off: off, Msg: field + ": " + err.Error()}
	}
	return nil
}

func fieldKind(field string) string {
	switch field {
	case "block_size":
		return "number"
	case "engines":
		return "list of strings"
	}
	return "string"
}

// rawNumber appends the number at the read position to d.raw (at most
// scoreMaxNumber bytes: a longer one is no int).
func (d *scoreBodyDecoder) rawNumber(field string) error {
	for {
		if !d.more() {
			if d.rerr == io.EOF {
				return nil // json.Unmarshal checks the number
			}
			return d.rerr
		}
		c := d.buf[d.pos]
		if !(c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E') {
			return nil
		}
		if d.rawLen == scoreMaxNumber {
			return d.fail("%s: number of over %d bytes, out of range", field, scoreMaxNumber)
		}
		d.appendRawByte(c)
		d.pos++
	}
}

// rawStrings appends the array of strings (or nulls) at the read position
// to the raw value and returns its length.
func (d *scoreBodyDecoder) rawStrings(field string) (int, error) {
	d.appendRawByte('[')
	d.pos++
	c, err := d.peek()
	if err != nil {
		return 0, err
	}
	if c == ']' {
		d.pos++
		d.appendRawByte(']')
		return 0, nil
	}
	for n := 1; ; n++ {
		switch c {
		case '"':
			err = d.rawString(0)
		case 'n':
			err = d.literal("null")
			d.appendRaw([]byte("null"))
		default:
			return 0, d.fail("%s: element is %s, not a string", field, valueWord(c))
		}
		if err != nil {
			return 0, err
		}
		if c, err = d.peek(); err != nil {
			return 0, err
		}
		d.pos++
		d.appendRawByte(c)
		switch c {
		case ']':
			return n, nil
		case ',':
		default:
			return 0, d.fail("%s: invalid character %q after an array element", field, c)
		}
		if c, err = d.peek(); err != nil {
			return 0, err
		}
	}
}

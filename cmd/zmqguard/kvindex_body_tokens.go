package main

// The tokens of kv-index's POST /score body (see kvindex_body.go).

import (
	"fmt"
)

// tokens decodes the tokens field: null, or an array of integers (or
// nulls) parsed into chunks, then copied once into a slice of their count.
//
// A repeated "tokens" key decodes, as encoding/json does, into the slice
// the earlier array left: elements past the new array's end stay in its
// backing array (d.hist), and a null element keeps what is there (0 past
// anything decoded since the last null or empty array).
func (d *scoreBodyDecoder) tokens() error {
	switch c := d.buf[d.pos]; c {
	case 'n':
		if err := d.literal("null"); err != nil {
			return err
		}
		d.req.Tokens, d.hist = nil, nil
		return nil
	case '[':
		d.pos++
	default:
		return d.fail("tokens: %s is not a list of integers", valueWord(c))
	}
	c, err := d.peek()
	if err != nil {
		return err
	}
	if c == ']' {
		d.pos++
		d.req.Tokens, d.hist = []int64{}, nil
		return nil
	}
	d.chunks = d.chunks[:0]
	defer d.putChunks()
	cur, k, n := d.first[:], 0, 0
	for {
		if n == d.max {
			return &scoreTooManyTokens{Max: d.max, Off: d.off()}
		}
		if k == len(cur) {
			ch := scoreChunks.Get().(*[]int64)
			d.chunks = append(d.chunks, ch)
			d.peak = max(d.peak, len(d.chunks)*8*scoreChunk)
			cur, k = *ch, 0
		}
		if v, used, ok := fastToken(d.buf[d.pos:d.end]); ok {
			cur[k] = v
			d.pos += used
		} else if d.buf[d.pos] == 'n' {
			if err := d.literal("null"); err != nil {
				return err
			}
			cur[k] = 0
			if n < len(d.hist) {
				cur[k] = d.hist[n]
			}
		} else if cur[k], err = d.token(); err != nil {
			return err
		}
		k++
		n++
		// Whitespace and the separator; the common case, a comma and the
		// next token, without the general path.
		if d.end-d.pos >= 2 && d.buf[d.pos] == ',' && d.buf[d.pos+1] >= '0' && d.buf[d.pos+1] <= '9' {
			d.pos++
			continue
		}
		if c, err = d.peek(); err != nil {
			return err
		}
		d.pos++
		if c == ']' {
			break
		}
		if c != ',' {
			return d.fail("tokens: invalid character %q after token %d", c, n)
		}
		if _, err = d.peek(); err != nil {
			return err
		}
	}
	dst := d.hist
	if n > len(dst) {
		dst = make([]int64, n)
		d.hist = dst
	}
	at := copy(dst, d.first[:min(n, scoreFirstChunk)])
	for _, ch := range d.chunks {
		at += copy(dst[at:n], *ch)
	}
	d.req.Tokens = dst[:n:n]
	return nil
}

func (d *scoreBodyDecoder) putChunks() {
	for i, ch := range d.chunks {
		scoreChunks.Put(ch)
		d.chunks[i] = nil
	}
	d.chunks = d.chunks[:0]
}

// token parses one token id at the read position: an integer in int64's
// range (a fraction or an exponent is refused, as encoding/json refuses
// them for an int64).
func (d *scoreBodyDecoder) token() (int64, error) {
	off := d.off()
	// The longest valid token and the byte after it fit in 21 bytes; with
	// that many buffered the token is parsed in place, else gathered.
	b := d.buf[d.pos:d.end]
	var tmp [24]byte
	inPlace := len(b) >= 21
	if !inPlace {
		k := 0
		for k < len(tmp) && d.more() {
			c := d.buf[d.pos]
			if !(c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E') {
				break
			}
			tmp[k] = c
			k++
			d.pos++
		}
		if k == 0 {
			if !d.more() {
				return 0, d.endErr()
			}
			return 0, d.fail("tokens: %s is not an integer", valueWord(d.buf[d.pos]))
		}
		b = tmp[:k]
	}
	v, used, msg := parseToken(b)
	if msg != "" {
		return 0, &scoreBodyError{Off: off, Msg: "tokens: " + msg}
	}
	if inPlace {
		d.pos += used
	}
	return v, nil
}

// fastToken parses the common token: 1 to 18 digits, the first not 0,
// then a byte that cannot continue a number, all in b. ok is false for
// anything else (token parses it or refuses it).
func fastToken(b []byte) (v int64, n int, ok bool) {
	if len(b) < 20 {
		return 0, 0, false
	}
	b = b[:20]
	u := uint64(b[0]) - '0'
	if u-1 > 8 {
		return 0, 0, false
	}
	i := 1
	for ; i < 19; i++ {
		d := uint64(b[i]) - '0'
		if d > 9 {
			break
		}
		u = u*10 + d
	}
	if i == 19 {
		return 0, 0, false
	}
	switch b[i] {
	case '.', 'e', 'E', '-', '+':
		return 0, 0, false
	}
	return int64(u), i, true
}

// parseToken parses the integer at the start of b, which holds the whole
// number and, when one follows, the byte after it.
func parseToken(b []byte) (int64, int, string) {
	i, neg := 0, false
	if i < len(b) && b[i] == '-' {
		neg = true
		i++
	}
	if i == len(b) || b[i] < '0' || b[i] > '9' {
		if i == len(b) {
			return 0, 0, "number ends after its sign"
		}
		return 0, 0, fmt.Sprintf("invalid character %q where a number was expected", b[i])
	}
	var u uint64
	if b[i] == '0' {
		i++
	} else {
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			if i-start == 19 {
				return 0, 0, "integer out of int64 range"
			}
			u = u*10 + uint64(b[i]-'0')
			i++
		}
	}
	if i < len(b) {
		switch c := b[i]; {
		case c == '.' || c == 'e' || c == 'E':
			return 0, 0, "a number with a fraction or an exponent is not a token id"
		case c >= '0' && c <= '9' || c == '-' || c == '+':
			return 0, 0, fmt.Sprintf("invalid character %q in a number", c)
		}
	}
	if neg {
		if u > 1<<63 {
			return 0, 0, "integer out of int64 range"
		}
		return int64(-u), i, ""
	}
	if u > 1<<63-1 {
		return 0, 0, "integer out of int64 range"
	}
	return int64(u), i, ""
}

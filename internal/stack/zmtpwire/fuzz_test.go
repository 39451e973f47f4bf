package zmtpwire

import (
	"errors"
	"testing"
)

// FuzzParsers feeds arbitrary bytes to every parser: none panics, every
// refusal is an *Error with a valid reason and at most 64 bytes of prefix,
// and what passes keeps the promises callers rely on (a header's size is
// within the limit and its length matches its flags; a READY's type is
// known, its identity at most 255 bytes, its properties within the count).
func FuzzParsers(f *testing.F) {
	g := LocalGreeting()
	f.Add(g[:], int64(1<<20), uint8(32))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"), int64(10), uint8(1))
	f.Add([]byte{FlagLong, 0, 0, 1, 0, 0, 0, 0, 0}, int64(1<<20), uint8(4))
	f.Add(append([]byte{5}, "READY\x0bSocket-Type\x00\x00\x00\x04PUSH"...), int64(64), uint8(8))
	f.Fuzz(func(t *testing.T, b []byte, max int64, maxProps uint8) {
		check := func(what string, err error) {
			if err == nil {
				return
			}
			var e *Error
			if !errors.As(err, &e) || !e.Reason.Valid() || len(e.Prefix) > maxPrefix {
				t.Fatalf("%s: refusal %v is not a well-formed *Error", what, err)
			}
		}
		check("CheckGreeting", CheckGreeting(b, false))
		check("CheckGreeting curve", CheckGreeting(b, true))

		if max < 0 {
			max = -max
		}
		h, ok, err := ParseFrameHeader(b, max)
		check("ParseFrameHeader", err)
		if ok && (h.Size < 0 || h.Size > max || h.Len != HeaderLen(b[0]) || h.Len > len(b) || (h.Command() && h.More())) {
			t.Fatalf("header %+v from % x (max %d)", h, b, max)
		}

		name, data, err := ParseCommand(b)
		check("ParseCommand", err)
		if err == nil && (len(name) == 0 || 1+len(name)+len(data) != len(b)) {
			t.Fatalf("command %q %q from % x", name, data, b)
		}

		r, err := ParseReady(b, "", int(maxProps), DefaultMaxPropertySize)
		check("ParseReady", err)
		if err == nil && (!KnownSocketType(r.SocketType) || len(r.Identity) > MaxIdentity || len(r.Properties) > int(maxProps)) {
			t.Fatalf("READY %+v from % x", r, b)
		}
	})
}

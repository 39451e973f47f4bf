package kvevents

import (
	"strconv"
	"testing"
)

// TestPayloadDigest: the digest is fixed (the same value in every process
// and on every machine: a Position kept by one process is checked by
// another), and every byte, the length and the lanes matter.
func TestPayloadDigest(t *testing.T) {
	p := make([]byte, 100)
	for i := range p {
		p[i] = byte(i * 7)
	}
	// Pinned values (computed once; the words are read little-endian
	// explicitly, so no machine differs): a change of the function breaks
	// every kept Position.
	for _, c := range []struct {
		n    int
		want uint64
	}{{0, 0x554719a5071e7c7f}, {1, 0x89a8add06938ec0d}, {7, 0xe9ccd4ac97a375db}, {8, 0x626074847c999c2e},
		{33, 0xe23e621a6d54622d}, {100, 0xba969d0c900dde9b}} {
		if got := payloadDigest(p[:c.n]); got != c.want {
			t.Errorf("payloadDigest(%d bytes) = %#016x, want %#016x", c.n, got, c.want)
		}
	}
	seen := map[uint64]string{}
	note := func(what string, d uint64) {
		if prev, dup := seen[d]; dup {
			t.Fatalf("%s and %s share the digest %#016x", what, prev, d)
		}
		seen[d] = what
	}
	for n := 0; n <= len(p); n++ {
		note("prefix "+strconv.Itoa(n), payloadDigest(p[:n]))
	}
	for i := range p {
		q := append([]byte(nil), p...)
		q[i] ^= 1
		note("flip "+strconv.Itoa(i), payloadDigest(q))
	}
	// Trailing zero bytes change it too.
	z := make([]byte, 9)
	for n := range z {
		if payloadDigest(z[:n]) == payloadDigest(z[:n+1]) {
			t.Fatalf("%d and %d zero bytes share a digest", n, n+1)
		}
	}
	// Batches of two runs at one seq (other timestamp) differ.
	if payloadDigest(payloadOf(4)) == payloadDigest(runB(4)) {
		t.Fatal("two runs' batches share a digest")
	}
}

package zmtpguard

import (
	"encoding/binary"
	"slices"

	"golang.org/x/crypto/poly1305"      //lint:ignore SA1019 used only as NaCl secretbox's building block, as secretbox itself does
	"golang.org/x/crypto/salsa20/salsa" //lint:ignore SA1019 CURVE needs the HSalsa20 core and the raw XSalsa20 stream (ZMTP CURVE, RFC 26), which only this package exposes
)

// messageBox seals and opens one direction's MESSAGE boxes. A NaCl box
// under a precomputed key is XSalsa20-Poly1305: HSalsa20 turns the key and
// the nonce's first 16 bytes into a subkey, and Salsa20 runs under that
// subkey with the nonce's last 8 bytes. Every MESSAGE nonce of one
// direction starts with the same 16-byte prefix (CurveZMQMESSAGEC or
// CurveZMQMESSAGES), so the subkey is computed once per connection instead
// of once per frame. The bytes are exactly box.SealAfterPrecomputation's
// (TestMessageBoxMatchesNaCl checks both ways).
type messageBox struct {
	subkey [32]byte
}

func newMessageBox(key *[32]byte, prefix string) messageBox {
	var b messageBox
	var in [16]byte
	copy(in[:], prefix)
	salsa.HSalsa20(&b.subkey, &in, key, &salsa.Sigma)
	return b
}

// firstBlock returns the first 64 bytes of the keystream for short nonce
// n: the Poly1305 key, then the keystream of the first 32 plaintext bytes.
func (b *messageBox) firstBlock(counter *[16]byte, n uint64) [64]byte {
	binary.BigEndian.PutUint64(counter[:8], n)
	var first [64]byte
	salsa.XORKeyStream(first[:], first[:], counter, &b.subkey)
	return first
}

// seal appends the box of plain (tag, then ciphertext) under short nonce n
// to out.
func (b *messageBox) seal(out, plain []byte, n uint64) []byte {
	var counter [16]byte
	first := b.firstBlock(&counter, n)
	start := len(out)
	out = append(out, make([]byte, poly1305.TagSize+len(plain))...)
	ct := out[start+poly1305.TagSize:]
	k := min(len(plain), 32)
	for i := 0; i < k; i++ {
		ct[i] = plain[i] ^ first[32+i]
	}
	if len(plain) > 32 {
		counter[8] = 1
		salsa.XORKeyStream(ct[32:], plain[32:], &counter, &b.subkey)
	}
	var key [32]byte
	copy(key[:], first[:32])
	var tag [poly1305.TagSize]byte
	poly1305.Sum(&tag, ct, &key)
	copy(out[start:], tag[:])
	return out
}

// openFrame authenticates boxed (tag, then ciphertext) under short nonce n
// and, if it is genuine, appends the plaintext after its first byte to out
// and returns that first byte (a MESSAGE's flags) separately. boxed must
// hold at least one plaintext byte. out must not overlap boxed.
func (b *messageBox) openFrame(out, boxed []byte, n uint64) ([]byte, byte, bool) {
	var counter [16]byte
	first := b.firstBlock(&counter, n)
	var key [32]byte
	copy(key[:], first[:32])
	var tag [poly1305.TagSize]byte
	copy(tag[:], boxed)
	ct := boxed[poly1305.TagSize:]
	if !poly1305.Verify(&tag, ct, &key) {
		return out, 0, false
	}
	flags := ct[0] ^ first[32]
	start := len(out)
	out = append(out, ct[1:min(len(ct), 32)]...)
	for i := range out[start:] {
		out[start+i] ^= first[33+i]
	}
	if len(ct) > 32 {
		counter[8] = 1
		rest := len(out)
		out = slices.Grow(out, len(ct)-32)[:rest+len(ct)-32]
		salsa.XORKeyStream(out[rest:], ct[32:], &counter, &b.subkey)
	}
	return out, flags, true
}

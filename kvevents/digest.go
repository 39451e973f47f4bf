package kvevents

import (
	"encoding/binary"
	"math/bits"
)

// The digest's constants: odd 64-bit multipliers with well-mixed bits
// (fractional parts of irrational numbers). Fixed, so that a digest is the
// same in every process and on every machine (a Position kept by one
// process is checked by another).
const (
	digestK0 = 0x9e3779b97f4a7c15
	digestK1 = 0xc2b2ae3d27d4eb4f
	digestK2 = 0x94d049bb133111eb
	digestK3 = 0xbf58476d1ce4e5b9
)

// payloadDigest is Batch.Digest: a 64-bit digest of a batch's payload
// bytes, read eight bytes at a time (little-endian words) in four
// independent lanes, so that it costs a small fraction of decoding the
// payload. It tells two batches apart (the continuity proof compares one
// publisher run's batch with another's at the same seq, and vLLM's payload
// starts with the batch's timestamp); it is not a defence against a peer
// forging collisions, which a peer able to publish on the stream has no
// need for.
func payloadDigest(p []byte) uint64 {
	n := uint64(len(p))
	a, b, c, d := uint64(digestK0), uint64(digestK1), uint64(digestK2), uint64(digestK3)^n
	for len(p) >= 32 {
		a = digestRound(a, binary.LittleEndian.Uint64(p))
		b = digestRound(b, binary.LittleEndian.Uint64(p[8:]))
		c = digestRound(c, binary.LittleEndian.Uint64(p[16:]))
		d = digestRound(d, binary.LittleEndian.Uint64(p[24:]))
		p = p[32:]
	}
	h := a ^ bits.RotateLeft64(b, 16) ^ bits.RotateLeft64(c, 32) ^ bits.RotateLeft64(d, 48)
	for len(p) >= 8 {
		h = digestRound(h, binary.LittleEndian.Uint64(p))
		p = p[8:]
	}
	if len(p) > 0 {
		// The last 1..7 bytes, with a 1 bit above them: a trailing zero
		// byte still changes the word.
		var w uint64
		for i := len(p) - 1; i >= 0; i-- {
			w = w<<8 | uint64(p[i])
		}
		w |= 1 << (8 * uint(len(p)))
		h = digestRound(h, w)
	}
	// Finalise: every input bit reaches every output bit.
	h ^= n * digestK1
	h ^= h >> 33
	h *= digestK2
	h ^= h >> 29
	h *= digestK3
	h ^= h >> 32
	return h
}

// digestRound folds one word into a lane: xor, multiply by an odd constant
// (a bijection of the lane for a fixed word), and fold the high bits down.
func digestRound(acc, w uint64) uint64 {
	acc = (acc ^ w) * digestK0
	return acc ^ acc>>31
}

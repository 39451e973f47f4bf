package vllmhash

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
)

// hashAlgo names one of vLLM's prefix-caching hash functions, spelled as
// vLLM's --prefix-caching-hash-algo spells it (vllm/utils/hashing.py).
type hashAlgo string

// The hash functions of vllm/utils/hashing.py.
const (
	// algoSHA256CBOR is SHA-256 of canonical CBOR: portable, the one to
	// choose (vLLM PR #20511).
	algoSHA256CBOR = "sha256_cbor"
	// algoSHA256 is SHA-256 of Python's pickle at protocol 5: vLLM's
	// default.
	algoSHA256 = "sha256"
	// algoXXHashCBOR is XXH3-128 of canonical CBOR (preimage only here).
	algoXXHashCBOR = "xxhash_cbor"
	// algoXXHash is XXH3-128 of Python's pickle (preimage only here).
	algoXXHash = "xxhash"
)

func (a hashAlgo) cbor() bool { return a == algoSHA256CBOR || a == algoXXHashCBOR }

func (a hashAlgo) valid() bool {
	return a == algoSHA256CBOR || a == algoSHA256 || a == algoXXHashCBOR || a == algoXXHash
}

// errTooLarge reports a pickle preimage that would not fit in one pickle
// frame (64 KiB), the only framing this package reproduces.
var errTooLarge = errors.New("vllmhash: pickle preimage larger than one 64 KiB frame")

// Digest is one SHA-256 block hash as vLLM computes it (BlockHash bytes).
type Digest [32]byte

// Uint64 returns the hash as vLLM's KV events publish it with integer block
// hashes: the last 8 bytes read big-endian.
func (d Digest) Uint64() uint64 { return binary.BigEndian.Uint64(d[24:]) }

// String returns the hash as lowercase hex.
func (d Digest) String() string { return hex.EncodeToString(d[:]) }

// mmKey is one multimodal extra key: the item's identifier and its offset
// relative to the block's first token (negative when the item began in an
// earlier block).
type mmKey struct {
	Identifier string
	Offset     int64
}

// extraKeys are a block's extra hash keys, in vLLM's order. The zero value
// means none (vLLM hashes None).
type extraKeys struct {
	// LoRAName is the LoRA adapter's name; "" when the request has none.
	LoRAName string
	// MM holds one key per multimodal item overlapping the block.
	MM []mmKey
	// CacheSalt is the request's cache salt on its first block; "" otherwise.
	CacheSalt string
	// EmbedsDigest is the SHA-256 of the block's raw prompt embeddings; nil
	// when the request has none.
	EmbedsDigest []byte
}

// empty reports whether there are no extra keys (vLLM hashes None).
func (e extraKeys) empty() bool {
	return e.LoRAName == "" && len(e.MM) == 0 && e.CacheSalt == "" && e.EmbedsDigest == nil
}

func (e extraKeys) count() int {
	n := len(e.MM)
	if e.LoRAName != "" {
		n++
	}
	if e.CacheSalt != "" {
		n++
	}
	if e.EmbedsDigest != nil {
		n++
	}
	return n
}

// Hasher computes block hashes with one hash function and one NONE_HASH.
// It is safe for concurrent use.
type Hasher struct {
	algo hashAlgo
	none Digest
}

// New returns a Hasher for vLLM's hash function algo ("sha256_cbor" or
// "sha256", as --prefix-caching-hash-algo names them) whose NONE_HASH is
// derived from pythonHashSeed, the value of the engines' PYTHONHASHSEED as
// vLLM reads it (a string: "0", "42"). "xxhash_cbor" and "xxhash" are
// refused: XXH3-128 would need a dependency the module does not carry.
func New(algo, pythonHashSeed string) (*Hasher, error) {
	switch algo {
	case algoSHA256CBOR, algoSHA256:
	case algoXXHashCBOR, algoXXHash:
		return nil, fmt.Errorf("vllmhash: hash function %q needs XXH3-128, which this module does not carry", algo)
	default:
		return nil, fmt.Errorf("vllmhash: unknown hash function %q (want sha256_cbor or sha256)", algo)
	}
	pre, err := noneHashPreimage(hashAlgo(algo), pythonHashSeed)
	if err != nil {
		return nil, err
	}
	return &Hasher{algo: hashAlgo(algo), none: sha256.Sum256(pre)}, nil
}

// noneHash returns NONE_HASH, the parent of every request's first block.
func (h *Hasher) noneHash() Digest { return h.none }

// noneHashPreimage returns the bytes vLLM's init_none_hash digests for
// PYTHONHASHSEED=seed under algo: the encoding of the seed as a str.
func noneHashPreimage(algo hashAlgo, seed string) ([]byte, error) {
	if !algo.valid() {
		return nil, fmt.Errorf("vllmhash: unknown hash function %q", algo)
	}
	if algo.cbor() {
		return cborString(nil, seed), nil
	}
	var p pickler
	p.begin()
	p.str(seed)
	return p.end()
}

// block returns the hash of one full block: parent is the previous block's
// hash, nil for a request's first block (NONE_HASH is used).
func (h *Hasher) block(parent *Digest, tokens []int64, extra extraKeys) (Digest, error) {
	p := h.none
	if parent != nil {
		p = *parent
	}
	pre, err := preimage(nil, h.algo, p[:], tokens, extra)
	if err != nil {
		return Digest{}, err
	}
	return sha256.Sum256(pre), nil
}

// preimage appends to dst the exact bytes vLLM's hash function algo digests
// for (parent, tokens, extra): canonical CBOR for the _cbor functions, a
// protocol-5 pickle for the others. parent must be the parent's hash bytes
// (NONE_HASH for a first block).
func preimage(dst []byte, algo hashAlgo, parent []byte, tokens []int64, extra extraKeys) ([]byte, error) {
	if !algo.valid() {
		return nil, fmt.Errorf("vllmhash: unknown hash function %q", algo)
	}
	if algo.cbor() {
		dst = cborHead(dst, 4, 3)
		dst = cborBytes(dst, parent)
		dst = cborHead(dst, 4, uint64(len(tokens)))
		for _, t := range tokens {
			dst = cborInt(dst, t)
		}
		if extra.empty() {
			return append(dst, 0xf6), nil
		}
		dst = cborHead(dst, 4, uint64(extra.count()))
		if extra.LoRAName != "" {
			dst = cborString(dst, extra.LoRAName)
		}
		for _, m := range extra.MM {
			dst = cborHead(dst, 4, 2)
			dst = cborString(dst, m.Identifier)
			dst = cborInt(dst, m.Offset)
		}
		if extra.CacheSalt != "" {
			dst = cborString(dst, extra.CacheSalt)
		}
		if extra.EmbedsDigest != nil {
			dst = cborBytes(dst, extra.EmbedsDigest)
		}
		return dst, nil
	}
	p := pickler{buf: dst}
	p.begin()
	p.bytes(parent)
	p.intTuple(tokens)
	if extra.empty() {
		p.buf = append(p.buf, opNone)
	} else {
		n := extra.count()
		if n > 3 {
			p.buf = append(p.buf, opMark)
		}
		if extra.LoRAName != "" {
			p.str(extra.LoRAName)
		}
		for _, m := range extra.MM {
			p.str(m.Identifier)
			p.int(m.Offset)
			p.tupleEnd(2)
		}
		if extra.CacheSalt != "" {
			p.str(extra.CacheSalt)
		}
		if extra.EmbedsDigest != nil {
			p.bytes(extra.EmbedsDigest)
		}
		p.tupleEnd(n)
	}
	p.tupleEnd(3)
	return p.end()
}

// --- canonical CBOR (RFC 8949 §4.2.1 as cbor2's canonical=True writes it) ---

func cborHead(dst []byte, major byte, n uint64) []byte {
	m := major << 5
	switch {
	case n < 24:
		return append(dst, m|byte(n))
	case n <= math.MaxUint8:
		return append(dst, m|24, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, m|25), uint16(n))
	case n <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(dst, m|26), uint32(n))
	default:
		return binary.BigEndian.AppendUint64(append(dst, m|27), n)
	}
}

func cborInt(dst []byte, v int64) []byte {
	if v >= 0 {
		return cborHead(dst, 0, uint64(v))
	}
	return cborHead(dst, 1, uint64(-(v + 1)))
}

func cborBytes(dst, b []byte) []byte { return append(cborHead(dst, 2, uint64(len(b))), b...) }

func cborString(dst []byte, s string) []byte {
	return append(cborHead(dst, 3, uint64(len(s))), s...)
}

// --- pickle protocol 5, as CPython's C pickler writes these shapes ---

const (
	opProto       = 0x80
	opFrame       = 0x95
	opStop        = '.'
	opNone        = 'N'
	opMark        = '('
	opTuple       = 't'
	opEmptyTuple  = ')'
	opTuple1      = 0x85
	opBinInt1     = 'K'
	opBinInt2     = 'M'
	opBinInt      = 'J'
	opLong1       = 0x8a
	opShortBytes  = 'C'
	opBinBytes    = 'B'
	opShortUni    = 0x8c
	opBinUnicode  = 'X'
	opMemoize     = 0x94
	frameHeader   = 9
	maxFrameBytes = 64 * 1024
)

type pickler struct {
	buf   []byte
	start int // index of the FRAME opcode
}

func (p *pickler) begin() {
	p.buf = append(p.buf, opProto, 5)
	p.start = len(p.buf)
	p.buf = append(p.buf, opFrame, 0, 0, 0, 0, 0, 0, 0, 0)
}

func (p *pickler) end() ([]byte, error) {
	p.buf = append(p.buf, opStop)
	n := len(p.buf) - p.start - frameHeader
	if n >= maxFrameBytes {
		return nil, errTooLarge
	}
	if n < 4 { // CPython drops the FRAME of a frame shorter than 4 bytes
		copy(p.buf[p.start:], p.buf[p.start+frameHeader:])
		return p.buf[:len(p.buf)-frameHeader], nil
	}
	binary.LittleEndian.PutUint64(p.buf[p.start+1:], uint64(n))
	return p.buf, nil
}

func (p *pickler) bytes(b []byte) {
	if len(b) < 256 {
		p.buf = append(p.buf, opShortBytes, byte(len(b)))
	} else {
		p.buf = binary.LittleEndian.AppendUint32(append(p.buf, opBinBytes), uint32(len(b)))
	}
	p.buf = append(append(p.buf, b...), opMemoize)
}

func (p *pickler) str(s string) {
	if len(s) < 256 {
		p.buf = append(p.buf, opShortUni, byte(len(s)))
	} else {
		p.buf = binary.LittleEndian.AppendUint32(append(p.buf, opBinUnicode), uint32(len(s)))
	}
	p.buf = append(append(p.buf, s...), opMemoize)
}

func (p *pickler) int(v int64) {
	switch {
	case v >= 0 && v < 256:
		p.buf = append(p.buf, opBinInt1, byte(v))
	case v >= 0 && v < 65536:
		p.buf = binary.LittleEndian.AppendUint16(append(p.buf, opBinInt2), uint16(v))
	case v >= math.MinInt32 && v <= math.MaxInt32:
		p.buf = binary.LittleEndian.AppendUint32(append(p.buf, opBinInt), uint32(int32(v)))
	default:
		// LONG1: two's complement little-endian in the fewest bytes that
		// keep the sign (Python's pickle.encode_long).
		var le [8]byte
		binary.LittleEndian.PutUint64(le[:], uint64(v))
		n := 8
		for n > 1 {
			top, next := le[n-1], le[n-2]
			if (v >= 0 && top == 0 && next&0x80 == 0) || (v < 0 && top == 0xff && next&0x80 != 0) {
				n--
				continue
			}
			break
		}
		p.buf = append(append(p.buf, opLong1, byte(n)), le[:n]...)
	}
}

func (p *pickler) intTuple(v []int64) {
	if len(v) == 0 {
		p.buf = append(p.buf, opEmptyTuple)
		return
	}
	if len(v) > 3 {
		p.buf = append(p.buf, opMark)
	}
	for _, t := range v {
		p.int(t)
	}
	p.tupleEnd(len(v))
}

// tupleEnd closes a tuple of n > 0 elements already written (after a MARK
// when n > 3) and memoizes it.
func (p *pickler) tupleEnd(n int) {
	if n <= 3 {
		p.buf = append(p.buf, opTuple1+byte(n-1))
	} else {
		p.buf = append(p.buf, opTuple)
	}
	p.buf = append(p.buf, opMemoize)
}

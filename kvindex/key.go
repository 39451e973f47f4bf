package kvindex

import (
	"encoding/binary"
	"math/bits"
)

// The local key is this package's own 64-bit hash, built on the folded
// 64×64→128-bit multiply (the high and low halves xor-ed): one multiply
// mixes two token ids, four independent lanes keep the multiplier busy, and
// the lanes, the length, the block size and the parent are folded at the
// end. It is not a cryptographic hash and need not be: a key only has to
// tell different prefixes apart for one deployment, and it must be the same
// in every process (router replicas share a Redis index), so it has no
// per-process random seed; Config.Seed lets a deployment pick its own.

const (
	k0 = 0xa0761d6478bd642f
	k1 = 0xe7037ed1a0b428db
	k2 = 0x8ebc6af09c88c6e3
	k3 = 0x589965cc75374cc3
	k4 = 0x1d8e4e27c47d124f
)

// DefaultSeed is the key seed when Config.Seed is 0.
const DefaultSeed = 0x7a6d71677561726b // "zmqguark"

func mum(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// hashBytes hashes a byte string (model, LoRA name, extra keys).
func hashBytes(seed uint64, b []byte) uint64 {
	h := mum(seed^k0, uint64(len(b))^k1)
	for len(b) >= 16 {
		h = mum(binary.LittleEndian.Uint64(b)^k2^h, binary.LittleEndian.Uint64(b[8:])^k3)
		b = b[16:]
	}
	var t [16]byte
	copy(t[:], b)
	return mum(binary.LittleEndian.Uint64(t[:])^k2^h, binary.LittleEndian.Uint64(t[8:])^k4^uint64(len(b)))
}

func hashString(seed uint64, s string) uint64 {
	// A copy is cheaper than an unsafe cast is worth here: names are short
	// and hashed once per event or request.
	var buf [64]byte
	if len(s) <= len(buf) {
		n := copy(buf[:], s)
		return hashBytes(seed, buf[:n])
	}
	return hashBytes(seed, []byte(s))
}

// hashTokens hashes one block's token ids: four lanes of two tokens each
// per round.
func hashTokens(seed uint64, t []int64) uint64 {
	a, b, c, d := seed^k1, seed^k2, seed^k3, seed^k4
	n := len(t)
	i := 0
	for ; i+8 <= n; i += 8 {
		a = mum(uint64(t[i])^k0^a, uint64(t[i+1])^k1) ^ a
		b = mum(uint64(t[i+2])^k0^b, uint64(t[i+3])^k2) ^ b
		c = mum(uint64(t[i+4])^k0^c, uint64(t[i+5])^k3) ^ c
		d = mum(uint64(t[i+6])^k0^d, uint64(t[i+7])^k4) ^ d
	}
	for ; i+2 <= n; i += 2 {
		a = mum(uint64(t[i])^k0^a, uint64(t[i+1])^k1) ^ a
	}
	if i < n {
		a = mum(uint64(t[i])^k0^a, k3) ^ a
	}
	h := mum(a^k2, b^k3) ^ mum(c^k4, d^k1)
	return mum(h^uint64(n), k0)
}

// keyspace is the root of one (seed, model, block size): the parent of
// every first block.
func keyspace(seed uint64, model string, blockSize int) uint64 {
	return mum(hashString(seed, model)^k3, uint64(blockSize)^k2)
}

// chain is one block's key from its parent's key (or the keyspace root),
// its tokens' hash and its LoRA and extra-keys hashes.
func chain(parent uint64, tokens, lora, extra uint64) Key {
	return Key(mum(parent^k0, tokens^k1) ^ mum(lora^k2^parent, extra^k3^tokens))
}

// KeyParams are what a block's local key depends on besides its tokens.
type KeyParams struct {
	// Seed is the key seed (0: DefaultSeed). Every process sharing an
	// index must use the same seed.
	Seed uint64
	// Model names the model: each model has its own keyspace.
	Model string
	// BlockSize is the engine's block size in tokens (> 0).
	BlockSize int
	// Parent is the key of the block before the first one, when HasParent;
	// otherwise the first block is a prompt's first block.
	Parent    Key
	HasParent bool
	// LoraName is the request's LoRA adapter ("" for none).
	LoraName string
	// ExtraKeys holds, when not nil, one entry per block: vLLM's
	// extra_keys tuple for that block as msgpack (what BlockStored
	// carries), or nil (equal to msgpack nil) for none. Missing entries
	// count as none.
	ExtraKeys [][]byte
}

// BlockKeys appends to dst the local keys of the full blocks of tokens
// (len(tokens)/BlockSize of them; a partial last block has no key) and
// returns it. It returns dst unchanged when BlockSize ≤ 0.
func BlockKeys(p KeyParams, tokens []int64, dst []Key) []Key {
	if p.BlockSize <= 0 {
		return dst
	}
	seed := p.Seed
	if seed == 0 {
		seed = DefaultSeed
	}
	root := keyspace(seed, p.Model, p.BlockSize)
	return blockKeys(seed, root, p.Parent, p.HasParent, hashLora(seed, p.LoraName), p.ExtraKeys, p.BlockSize, tokens, dst)
}

func hashLora(seed uint64, name string) uint64 {
	if name == "" {
		return 0
	}
	return hashString(seed^k4, name)
}

func hashExtra(seed uint64, b []byte) uint64 {
	if len(b) == 0 || (len(b) == 1 && b[0] == 0xc0) {
		return 0
	}
	return hashBytes(seed^k1, b)
}

func blockKeys(seed, root uint64, parent Key, hasParent bool, lora uint64, extra [][]byte, bs int, tokens []int64, dst []Key) []Key {
	prev := root
	if hasParent {
		prev = uint64(parent) ^ root
	}
	n := len(tokens) / bs
	for i := 0; i < n; i++ {
		var x uint64
		if i < len(extra) {
			x = hashExtra(seed, extra[i])
		}
		k := chain(prev, hashTokens(seed, tokens[i*bs:(i+1)*bs]), lora, x)
		dst = append(dst, k)
		prev = uint64(k) ^ root
	}
	return dst
}

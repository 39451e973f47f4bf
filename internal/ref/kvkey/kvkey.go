// Package kvkey holds what package kvindex, its backends and its reference
// model share but a user of kvindex never calls: the local-key hash, the
// limits on what an event may name, and the rule that leaves partial
// KV-cache groups out.
//
// The local key is kvindex's own 64-bit hash, built on the folded
// 64×64→128-bit multiply (the high and low halves xor-ed): one multiply
// mixes two token ids, four independent lanes keep the multiplier busy, and
// the lanes, the length, the block size and the parent are folded at the
// end. It is not a cryptographic hash and need not be: a key only has to
// tell different prefixes apart for one deployment, and it must be the same
// in every process (router replicas share a Redis index), so it has no
// per-process random seed; kvindex.Config.Seed lets a deployment pick its
// own.
package kvkey

import (
	"encoding/binary"
	"math/bits"
)

// DefaultSeed is the key seed when kvindex.Config.Seed is 0 ("zmqguark").
const DefaultSeed = 0x7a6d71677561726b

// Medium is the medium of an event that names none: releases before the
// medium field (vLLM PR #19737) published GPU blocks only.
const Medium = "GPU"

// MaxBlockSize bounds a block size the index accepts.
const MaxBlockSize = 1 << 16

// MaxGroup is the highest KV-cache group index the index accepts.
const MaxGroup = 255

// MaxMediumLen bounds a medium name.
const MaxMediumLen = 64

// MaxMediums is how many distinct medium names a backend keeps.
const MaxMediums = 64

// partialKinds are the KV-cache group kinds whose blocks do not hold a
// whole prefix (vLLM's KVCacheSpecKind, vllm/v1/kv_cache_interface.py; sent
// since vLLM PR #40984): a sliding-window or chunked-local group drops the
// blocks before its window, a Mamba group keeps a state, not the prefix's
// KV, and encoder-only and cross-attention caches are not prompt prefixes.
var partialKinds = map[string]bool{
	"sliding_window": true, "sliding_window_mla": true, "mamba": true, "chunked_local_attention": true,
	"encoder_only_attention": true, "cross_attention": true,
}

// PartialKind reports whether a KV-cache group of this kind (an event's
// kv_cache_spec_kind) does not hold a whole prefix (a sliding-window,
// chunked-local, Mamba, encoder-only or cross-attention group): the index
// leaves events of such groups out. An event that names no kind is of a
// whole-prefix group; callers pass the kind only when the event names one.
func PartialKind(kind string) bool {
	return partialKinds[kind]
}

const (
	k0 = 0xa0761d6478bd642f
	k1 = 0xe7037ed1a0b428db
	k2 = 0x8ebc6af09c88c6e3
	k3 = 0x589965cc75374cc3
	k4 = 0x1d8e4e27c47d124f
)

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

// Keyspace is the root of one (seed, model, block size): the parent of
// every first block.
func Keyspace(seed uint64, model string, blockSize int) uint64 {
	return mum(hashString(seed, model)^k3, uint64(blockSize)^k2)
}

// chain is one block's key from its parent's key (or the keyspace root),
// its tokens' hash and its LoRA and extra-keys hashes.
func chain(parent uint64, tokens, lora, extra uint64) uint64 {
	return mum(parent^k0, tokens^k1) ^ mum(lora^k2^parent, extra^k3^tokens)
}

// Lora is the hash of a LoRA name that Chain takes (0 for none).
func Lora(seed uint64, name string) uint64 {
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

// Chain appends to dst the keys of the full blocks of tokens in blocks of
// bs, chained from root (the Keyspace) and, when hasParent, from parent;
// lora is Lora's hash, extra one msgpack extra-keys value per block (nil
// entries and missing ones mean none).
func Chain[K ~uint64](seed, root uint64, parent K, hasParent bool, lora uint64, extra [][]byte, bs int, tokens []int64, dst []K) []K {
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
		dst = append(dst, K(k))
		prev = k ^ root
	}
	return dst
}

// Params are what a block's local key depends on besides its tokens.
type Params[K ~uint64] struct {
	// Seed is the key seed (0: DefaultSeed).
	Seed uint64
	// Model names the model: each model has its own keyspace.
	Model string
	// BlockSize is the engine's block size in tokens (> 0).
	BlockSize int
	// Parent is the key of the block before the first one, when HasParent;
	// otherwise the first block is a prompt's first block.
	Parent    K
	HasParent bool
	// LoraName is the request's LoRA adapter ("" for none).
	LoraName string
	// ExtraKeys holds, when not nil, one msgpack extra-keys value per
	// block (nil for none).
	ExtraKeys [][]byte
}

// BlockKeys appends to dst the local keys of the full blocks of tokens
// (len(tokens)/BlockSize of them) and returns it; dst unchanged when
// BlockSize ≤ 0.
func BlockKeys[K ~uint64](p Params[K], tokens []int64, dst []K) []K {
	if p.BlockSize <= 0 {
		return dst
	}
	seed := p.Seed
	if seed == 0 {
		seed = DefaultSeed
	}
	root := Keyspace(seed, p.Model, p.BlockSize)
	return Chain(seed, root, p.Parent, p.HasParent, Lora(seed, p.LoraName), p.ExtraKeys, p.BlockSize, tokens, dst)
}

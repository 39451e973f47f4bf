package main

import (
	"github.com/zmqguard/zmqguard/kvevents"
)

// The fleet's stream. Engine e owns the hashes (e+1)<<40 | k (every hash
// takes 8 bytes on the wire, as a real 64-bit hash; llm-d refuses small ones). Its cache holds
// (entries ÷ engines) blocks of 16 tokens: for the first `holders` engines
// a prefix of the scored prompt (hashes base | 1<<39 | i, never removed),
// the rest chains of 64 random blocks (hashes base | k, k = 1, 2, ...).
// The prefill stores them as batches of 16 BlockStored events of up to 16
// blocks; the steady stream then sends batches of 16 events, 8
// BlockStored of 2 new blocks chained to the engine's previous one and 8
// BlockRemoved of its 2 oldest random blocks, so the index keeps the same
// number of entries. Every batch is vLLM's array form (v0.9 to v0.25),
// which both zmqguard and llm-d-kv-cache v0.8.1 decode, published as
// [topic "kv@engine-NNNN@bench-model", seq, payload].

const (
	blockSize     = 16
	chainBlocks   = 64
	prefillBlocks = 16 // blocks per prefill BlockStored
	batchEvents   = 16 // events per message
	steadyBlocks  = 2  // blocks per steady BlockStored and BlockRemoved
	model         = "bench-model"
)

// rng is splitmix64.
type rng uint64

func (r *rng) next() uint64 {
	*r += 0x9e3779b97f4a7c15
	z := uint64(*r)
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// prompt returns the scored prompt's tokens (promptBlocks blocks).
func prompt(promptBlocks int) []int64 {
	r := rng(42)
	out := make([]int64, promptBlocks*blockSize)
	for i := range out {
		out[i] = int64(r.next() % 150000)
	}
	return out
}

// held is how many prompt blocks engine e holds.
func held(e, holders, promptBlocks, perEngine int) int {
	if e >= holders {
		return 0
	}
	return min(promptBlocks-(e*promptBlocks)/holders, perEngine)
}

// engineStream generates one engine's messages.
type engineStream struct {
	e        int
	base     uint64
	r        rng
	next     uint64 // next random block k
	oldest   uint64 // oldest random block k not removed
	prompt   []int64
	held     int // prompt blocks still to prefill
	heldDone int // prompt blocks prefilled
	randLeft int // random blocks to prefill
	toks     []int64
	hs       []kvevents.Hash
	evs      []kvevents.Event
	ts       float64
}

func newEngineStream(e, perEngine, holders int, p []int64) *engineStream {
	h := held(e, holders, len(p)/blockSize, perEngine)
	return &engineStream{e: e, base: uint64(e+1) << 40, r: rng(e + 1000), next: 1, oldest: 1, prompt: p,
		held: h, randLeft: perEngine - h,
		toks: make([]int64, batchEvents*prefillBlocks*blockSize), hs: make([]kvevents.Hash, batchEvents*prefillBlocks)}
}

func (s *engineStream) random(dst []int64) {
	for i := range dst {
		dst[i] = int64(s.r.next() % 150000)
	}
}

// prefillBatch appends the next prefill message's payload to dst and
// returns it with its event count; 0 events when the prefill is done.
func (s *engineStream) prefillBatch(dst []byte) ([]byte, int) {
	s.evs = s.evs[:0]
	ti, hi := 0, 0
	for len(s.evs) < batchEvents && (s.held > 0 || s.randLeft > 0) {
		ev := kvevents.Event{Type: kvevents.BlockStored, BlockSize: blockSize, Medium: kvevents.Some("GPU")}
		if s.held > 0 {
			// The prompt chain, from block heldDone on.
			start := s.heldDone
			m := min(prefillBlocks, s.held)
			if start > 0 {
				ev.ParentBlockHash = kvevents.Opt[kvevents.Hash]{V: kvevents.IntHash(s.base | 1<<39 | uint64(start-1)), Valid: true}
			}
			for i := 0; i < m; i++ {
				s.hs[hi+i] = kvevents.IntHash(s.base | 1<<39 | uint64(start+i))
			}
			t := s.toks[ti : ti+m*blockSize]
			copy(t, s.prompt[start*blockSize:])
			ev.TokenIDs, ev.BlockHashes = t, s.hs[hi:hi+m]
			ti, hi = ti+m*blockSize, hi+m
			s.held -= m
			s.heldDone += m
		} else {
			// A random chain: a new one every chainBlocks blocks.
			inChain := int((s.next - 1) % chainBlocks)
			m := min(prefillBlocks, s.randLeft, chainBlocks-inChain)
			if inChain > 0 {
				ev.ParentBlockHash = kvevents.Opt[kvevents.Hash]{V: kvevents.IntHash(s.base | (s.next - 1)), Valid: true}
			}
			for i := 0; i < m; i++ {
				s.hs[hi+i] = kvevents.IntHash(s.base | (s.next + uint64(i)))
			}
			t := s.toks[ti : ti+m*blockSize]
			s.random(t)
			ev.TokenIDs, ev.BlockHashes = t, s.hs[hi:hi+m]
			ti, hi = ti+m*blockSize, hi+m
			s.next += uint64(m)
			s.randLeft -= m
		}
		s.evs = append(s.evs, ev)
	}
	if len(s.evs) == 0 {
		return dst, 0
	}
	s.ts++
	return kvevents.AppendBatch(dst, 1.7e9+s.ts, s.evs, kvevents.Opt[int64]{}, false), len(s.evs)
}

// steadyBatch appends the next steady message's payload to dst.
func (s *engineStream) steadyBatch(dst []byte) ([]byte, int) {
	s.evs = s.evs[:0]
	ti, hi := 0, 0
	for i := 0; i < batchEvents; i++ {
		if i%2 == 1 && s.next-s.oldest > steadyBlocks {
			for j := 0; j < steadyBlocks; j++ {
				s.hs[hi+j] = kvevents.IntHash(s.base | (s.oldest + uint64(j)))
			}
			s.evs = append(s.evs, kvevents.Event{Type: kvevents.BlockRemoved, Medium: kvevents.Some("GPU"),
				BlockHashes: s.hs[hi : hi+steadyBlocks]})
			hi += steadyBlocks
			s.oldest += steadyBlocks
			continue
		}
		ev := kvevents.Event{Type: kvevents.BlockStored, BlockSize: blockSize, Medium: kvevents.Some("GPU")}
		if (s.next-1)%chainBlocks != 0 {
			ev.ParentBlockHash = kvevents.Opt[kvevents.Hash]{V: kvevents.IntHash(s.base | (s.next - 1)), Valid: true}
		}
		for j := 0; j < steadyBlocks; j++ {
			s.hs[hi+j] = kvevents.IntHash(s.base | (s.next + uint64(j)))
		}
		t := s.toks[ti : ti+steadyBlocks*blockSize]
		s.random(t)
		ev.TokenIDs, ev.BlockHashes = t, s.hs[hi:hi+steadyBlocks]
		ti, hi = ti+steadyBlocks*blockSize, hi+steadyBlocks
		s.next += steadyBlocks
		s.evs = append(s.evs, ev)
	}
	s.ts++
	return kvevents.AppendBatch(dst, 1.7e9+s.ts, s.evs, kvevents.Opt[int64]{}, false), len(s.evs)
}

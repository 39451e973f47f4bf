// Package kvstream is the KV-event stream the fleet benchmarks publish:
// bench/routerpath's engines play it, and bench/kvbaseline's llm-d child,
// which follows those engines, counts by its constants. Both benchmarks'
// publisher children bind their engines' XPUB sockets with [Bind] and number
// their messages with [Engine.Send]. It is test tooling: deterministic (the
// same bytes for the same arguments, in every run and every program) and
// trusting its arguments.
//
// The fleet's stream. Engine e owns the hashes (e+1)<<40 | k (every hash
// takes 8 bytes on the wire, as a real 64-bit hash; llm-d refuses small
// ones). Its cache holds (entries ÷ engines) blocks of 16 tokens: for the first `holders` engines
// a prefix of the scored prompt (hashes base | 1<<39 | i, never removed),
// the rest chains of 64 random blocks (hashes base | k, k = 1, 2, ...).
// The prefill stores them as batches of 16 BlockStored events of up to 16
// blocks; the steady stream then sends batches of 16 events, 8
// BlockStored of 2 new blocks chained to the engine's previous one and 8
// BlockRemoved of its 2 oldest random blocks, so the index keeps the same
// number of entries. Every batch is vLLM's array form (v0.9 to v0.25),
// which both zmqguard and llm-d-kv-cache v0.8.1 decode, published as
// [topic "kv@engine-NNNN@bench-model", seq, payload].
package kvstream

import (
	"fmt"

	"github.com/zmqguard/zmqguard/kvevents"
)

// The stream's shape.
const (
	// BlockSize is the tokens per block.
	BlockSize = 16
	// ChainBlocks is the length of a random chain.
	ChainBlocks = 64
	// PrefillBlocks is the most blocks per prefill BlockStored.
	PrefillBlocks = 16
	// BatchEvents is the most events per message.
	BatchEvents = 16
	// SteadyBlocks is the blocks per steady BlockStored and BlockRemoved.
	SteadyBlocks = 2
	// Model is the model every engine serves (the topic's last part).
	Model = "bench-model"
)

// EngineName is engine i's name, the middle of its topic.
func EngineName(i int) string { return fmt.Sprintf("engine-%04d", i) }

// Topic is engine i's topic, kv@{name}@{model} as llm-d names engines.
func Topic(i int) string { return "kv@" + EngineName(i) + "@" + Model }

// rng is splitmix64.
type rng uint64

func (r *rng) next() uint64 {
	*r += 0x9e3779b97f4a7c15
	z := uint64(*r)
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// Prompt returns the scored prompt's tokens (promptBlocks blocks).
func Prompt(promptBlocks int) []int64 {
	r := rng(42)
	out := make([]int64, promptBlocks*BlockSize)
	for i := range out {
		out[i] = int64(r.next() % 150000)
	}
	return out
}

// Held is how many prompt blocks engine e holds.
func Held(e, holders, promptBlocks, perEngine int) int {
	if e >= holders {
		return 0
	}
	return min(promptBlocks-(e*promptBlocks)/holders, perEngine)
}

// Stream generates one engine's messages.
type Stream struct {
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

// NewStream returns engine e's stream: perEngine blocks to prefill, the
// prompt p's prefix among them when e < holders.
func NewStream(e, perEngine, holders int, p []int64) *Stream {
	h := Held(e, holders, len(p)/BlockSize, perEngine)
	return &Stream{e: e, base: uint64(e+1) << 40, r: rng(e + 1000), next: 1, oldest: 1, prompt: p,
		held: h, randLeft: perEngine - h,
		toks: make([]int64, BatchEvents*PrefillBlocks*BlockSize), hs: make([]kvevents.Hash, BatchEvents*PrefillBlocks)}
}

func (s *Stream) random(dst []int64) {
	for i := range dst {
		dst[i] = int64(s.r.next() % 150000)
	}
}

// PrefillBatch appends the next prefill message's payload to dst and
// returns it with its event count; 0 events when the prefill is done.
func (s *Stream) PrefillBatch(dst []byte) ([]byte, int) {
	s.evs = s.evs[:0]
	ti, hi := 0, 0
	for len(s.evs) < BatchEvents && (s.held > 0 || s.randLeft > 0) {
		ev := kvevents.Event{Type: kvevents.BlockStored, BlockSize: BlockSize, Medium: kvevents.Some("GPU")}
		if s.held > 0 {
			// The prompt chain, from block heldDone on.
			start := s.heldDone
			m := min(PrefillBlocks, s.held)
			if start > 0 {
				ev.ParentBlockHash = kvevents.Opt[kvevents.Hash]{V: kvevents.IntHash(s.base | 1<<39 | uint64(start-1)), Valid: true}
			}
			for i := 0; i < m; i++ {
				s.hs[hi+i] = kvevents.IntHash(s.base | 1<<39 | uint64(start+i))
			}
			t := s.toks[ti : ti+m*BlockSize]
			copy(t, s.prompt[start*BlockSize:])
			ev.TokenIDs, ev.BlockHashes = t, s.hs[hi:hi+m]
			ti, hi = ti+m*BlockSize, hi+m
			s.held -= m
			s.heldDone += m
		} else {
			// A random chain: a new one every ChainBlocks blocks.
			inChain := int((s.next - 1) % ChainBlocks)
			m := min(PrefillBlocks, s.randLeft, ChainBlocks-inChain)
			if inChain > 0 {
				ev.ParentBlockHash = kvevents.Opt[kvevents.Hash]{V: kvevents.IntHash(s.base | (s.next - 1)), Valid: true}
			}
			for i := 0; i < m; i++ {
				s.hs[hi+i] = kvevents.IntHash(s.base | (s.next + uint64(i)))
			}
			t := s.toks[ti : ti+m*BlockSize]
			s.random(t)
			ev.TokenIDs, ev.BlockHashes = t, s.hs[hi:hi+m]
			ti, hi = ti+m*BlockSize, hi+m
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

// SteadyBatch appends the next steady message's payload to dst.
func (s *Stream) SteadyBatch(dst []byte) ([]byte, int) {
	s.evs = s.evs[:0]
	ti, hi := 0, 0
	for i := 0; i < BatchEvents; i++ {
		if i%2 == 1 && s.next-s.oldest > SteadyBlocks {
			for j := 0; j < SteadyBlocks; j++ {
				s.hs[hi+j] = kvevents.IntHash(s.base | (s.oldest + uint64(j)))
			}
			s.evs = append(s.evs, kvevents.Event{Type: kvevents.BlockRemoved, Medium: kvevents.Some("GPU"),
				BlockHashes: s.hs[hi : hi+SteadyBlocks]})
			hi += SteadyBlocks
			s.oldest += SteadyBlocks
			continue
		}
		ev := kvevents.Event{Type: kvevents.BlockStored, BlockSize: BlockSize, Medium: kvevents.Some("GPU")}
		if (s.next-1)%ChainBlocks != 0 {
			ev.ParentBlockHash = kvevents.Opt[kvevents.Hash]{V: kvevents.IntHash(s.base | (s.next - 1)), Valid: true}
		}
		for j := 0; j < SteadyBlocks; j++ {
			s.hs[hi+j] = kvevents.IntHash(s.base | (s.next + uint64(j)))
		}
		t := s.toks[ti : ti+SteadyBlocks*BlockSize]
		s.random(t)
		ev.TokenIDs, ev.BlockHashes = t, s.hs[hi:hi+SteadyBlocks]
		ti, hi = ti+SteadyBlocks*BlockSize, hi+SteadyBlocks
		s.next += SteadyBlocks
		s.evs = append(s.evs, ev)
	}
	s.ts++
	return kvevents.AppendBatch(dst, 1.7e9+s.ts, s.evs, kvevents.Opt[int64]{}, false), len(s.evs)
}

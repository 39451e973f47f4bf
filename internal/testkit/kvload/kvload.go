// Package kvload builds the synthetic fleets kvindex's benchmarks measure:
// many engines, each caching chains of blocks, some holding prefixes of
// one prompt; and a steady stream of stores and removals. The Go benchmarks
// of package kvindex and the bench/kvindexbench program share it, so the
// figures in BENCHMARKS.md and `go test -bench` measure the same thing.
package kvload

import (
	"fmt"

	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
)

// Fleet describes a fleet's cache.
type Fleet struct {
	// Engines is the number of engines; Blocks the total blocks indexed
	// (spread evenly over the engines, one entry each).
	Engines, Blocks int
	// BlockSize is tokens per block; PromptBlocks the prompt's blocks.
	BlockSize, PromptBlocks int
	// Holders engines hold a prefix of the prompt, of lengths spread
	// over 1..PromptBlocks (engine 0 holds it all).
	Holders int
	// Shared is how many leading prompt blocks every engine holds (a
	// fleet-wide system prompt), 0 for none.
	Shared int
	// ChainBlocks is the length of each engine's other chains.
	ChainBlocks int
}

// EngineName is engine i's name.
func EngineName(i int) string { return fmt.Sprintf("engine-%04d", i) }

// rng is splitmix64.
type rng uint64

func (r *rng) next() uint64 {
	*r += 0x9e3779b97f4a7c15
	z := uint64(*r)
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// Prompt returns the prompt's tokens.
func (f Fleet) Prompt() []int64 {
	r := rng(42)
	out := make([]int64, f.PromptBlocks*f.BlockSize)
	for i := range out {
		out[i] = int64(r.next() % 150000)
	}
	return out
}

const perEvent = 16 // blocks per BlockStored

// Build stores the fleet's blocks into x, engine by engine, in batches of
// BlockStored events of 16 chained blocks, and returns the number of
// entries stored.
func (f Fleet) Build(x *kvindex.Index) (int, error) {
	prompt := f.Prompt()
	per := f.Blocks / f.Engines
	chain := max(f.ChainBlocks, perEvent)
	toks := make([]int64, perEvent*f.BlockSize)
	var evs []kvevents.Event
	n := 0
	for e := 0; e < f.Engines; e++ {
		name := EngineName(e)
		h := uint64(e+1) << 40
		r := rng(e + 1000)
		left := per
		// storeRun stores blocks [from, to) of a chain whose tokens src
		// fills, chained under parent.
		storeRun := func(src func(block int, dst []int64), from, to int) error {
			parent := int64(-1)
			for b := from; b < to; b += perEvent {
				m := min(perEvent, to-b)
				for i := 0; i < m; i++ {
					src(b+i, toks[i*f.BlockSize:(i+1)*f.BlockSize])
				}
				ev := kvevents.Event{Type: kvevents.BlockStored, BlockSize: int64(f.BlockSize),
					TokenIDs: toks[:m*f.BlockSize], Medium: kvevents.Some("GPU")}
				if parent >= 0 {
					ev.ParentBlockHash = kvevents.Opt[kvevents.Hash]{V: kvevents.IntHash(uint64(parent)), Valid: true}
				}
				for i := 0; i < m; i++ {
					h++
					ev.BlockHashes = append(ev.BlockHashes, kvevents.IntHash(h))
				}
				parent = int64(h)
				evs = append(evs[:0], ev)
				if err := x.ApplyEvents(name, evs); err != nil {
					return err
				}
				n += m
				left -= m
			}
			return nil
		}
		fromPrompt := func(b int, dst []int64) { copy(dst, prompt[b*f.BlockSize:]) }
		held := 0
		if e < f.Holders {
			held = f.PromptBlocks - (e*f.PromptBlocks)/max(f.Holders, 1)
		}
		held = max(held, f.Shared)
		if held > 0 {
			if err := storeRun(fromPrompt, 0, min(held, left)); err != nil {
				return n, err
			}
		}
		for left > 0 {
			random := func(_ int, dst []int64) {
				for i := range dst {
					dst[i] = int64(r.next() % 150000)
				}
			}
			if err := storeRun(random, 0, min(chain, left)); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// Stream is a steady stream of one engine's events: stores of new blocks
// chained to the engine's previous ones, and removals of its oldest.
type Stream struct {
	name      string
	bs        int
	r         rng
	next      uint64 // next hash
	oldest    uint64 // oldest hash not removed
	toks      []int64
	hs        []kvevents.Hash
	evs       []kvevents.Event
	removeGap uint64
}

// NewStream returns engine's stream of blocks of bs tokens; it keeps about
// live blocks cached (removing the oldest past that).
func NewStream(engine string, seed uint64, bs, live int) *Stream {
	base := seed<<40 | 1
	return &Stream{name: engine, bs: bs, r: rng(seed), next: base, oldest: base, removeGap: uint64(live)}
}

// Engine returns the stream's engine name.
func (s *Stream) Engine() string { return s.name }

// Batch returns the next batch of n events: each a BlockStored of one
// block chained to the previous one, or, once live blocks are cached,
// every other event a BlockRemoved of the oldest (a full cache: each new
// block evicts one). The events are valid until the next call.
func (s *Stream) Batch(n int) []kvevents.Event {
	if cap(s.toks) < n*s.bs {
		s.toks = make([]int64, n*s.bs)
		s.hs = make([]kvevents.Hash, n)
	}
	s.evs = s.evs[:0]
	for i := 0; i < n; i++ {
		if i%2 == 1 && s.next-s.oldest > s.removeGap {
			s.hs[i] = kvevents.IntHash(s.oldest)
			s.evs = append(s.evs, kvevents.Event{Type: kvevents.BlockRemoved, Medium: kvevents.Some("GPU"),
				BlockHashes: s.hs[i : i+1]})
			s.oldest++
			continue
		}
		t := s.toks[i*s.bs : (i+1)*s.bs]
		for j := range t {
			t[j] = int64(s.r.next() % 150000)
		}
		s.hs[i] = kvevents.IntHash(s.next)
		ev := kvevents.Event{Type: kvevents.BlockStored, BlockSize: int64(s.bs), TokenIDs: t,
			Medium: kvevents.Some("GPU"), BlockHashes: s.hs[i : i+1]}
		if s.next%64 != 1 { // a new chain every 64 blocks
			ev.ParentBlockHash = kvevents.Opt[kvevents.Hash]{V: kvevents.IntHash(s.next - 1), Valid: true}
		}
		s.next++
		s.evs = append(s.evs, ev)
	}
	return s.evs
}

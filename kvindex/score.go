package kvindex

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/zmqguard/zmqguard/internal/ref/kvkey"
)

// MaxScoreTokens bounds the prompt Score accepts (a million tokens).
const MaxScoreTokens = 1 << 20

// ScoreRequest is a prompt to score.
type ScoreRequest struct {
	// Model is the model the request names (Config.Model's meaning).
	Model string
	// Tokens are the prompt's token ids.
	Tokens []int64
	// LoraName is the request's LoRA adapter ("" for none).
	LoraName string
	// ExtraKeys holds, when not nil, each block's vLLM extra keys as
	// msgpack, as the engine publishes them in BlockStored.extra_keys
	// (LoRA name, multimodal hashes, cache salt); see [LoraExtraKeys] for
	// the common LoRA case. nil entries (and missing ones) mean none.
	ExtraKeys [][]byte
	// BlockSize, when > 0, is the one block size to score with; by
	// default every block size the index has seen stores of for Model
	// (or Config.BlockSize when none).
	BlockSize int
	// Request is handed to Config.Keys untouched: what a key function
	// needs beyond Tokens and LoraName (package vllmhash reads a
	// *vllmhash.Request here, for multimodal items, a cache salt or
	// prompt embeddings). Local keys ignore it.
	Request any
	// Engines, when not empty, are the candidate engines: the answer
	// holds these only (a router scores the engines it may route the
	// request to). Names not known to the index are ignored.
	Engines []string
}

// Prefix is a cached prefix of the prompt: Blocks (and Tokens) the
// leading blocks certainly held, MaybeBlocks (≥ Blocks, and MaybeTokens)
// counting as well blocks whose entries are uncertain (stored before a lost
// range and not stored since): the engine may no longer hold those.
type Prefix struct {
	Blocks, Tokens           int
	MaybeBlocks, MaybeTokens int
}

// Tier is an engine's cached prefix on one medium.
type Tier struct {
	Medium string
	Prefix
}

// EngineScore is one engine's cached prefix of the prompt. Its Prefix
// counts a block when the engine holds it on any medium (vLLM's offloading
// connector continues a GPU prefix hit from CPU or storage); Tiers has the
// prefix on each medium alone, by medium name.
type EngineScore struct {
	Engine string
	// BlockSize is the block size the prefix is counted in.
	BlockSize int
	Prefix
	Tiers []Tier
}

// ScoreResult is what Score finds.
type ScoreResult struct {
	// PromptBlocks is the number of full blocks of the prompt, at the
	// smallest block size scored.
	PromptBlocks int
	// Engines holds every engine with a prefix of at least one block,
	// certain or not: most certain tokens first, then most maybe tokens,
	// then by engine name and block size.
	Engines []EngineScore
	// UnknownModel reports that no engine the index knows serves the
	// request's model (counted in Stats.UnknownModels): an empty answer
	// then says nothing about the cache. The engines known to serve a
	// model: every engine serves Config.Model when Config.ModelOf is nil;
	// else those ModelOf named it for (an engine is known from its first
	// update), and any model stores were indexed under.
	UnknownModel bool
}

// Best returns the engine with the most certain tokens (ties: most maybe
// tokens, then by name), and false when no engine certainly holds a
// block.
func (r ScoreResult) Best() (EngineScore, bool) {
	if len(r.Engines) == 0 || r.Engines[0].Blocks == 0 {
		return EngineScore{}, false
	}
	return r.Engines[0], true
}

// LoraExtraKeys returns the extra keys vLLM attaches to each of blocks
// blocks of a LoRA request without multimodal inputs or cache salt: the
// one-element tuple (lora_name,) as msgpack.
func LoraExtraKeys(loraName string, blocks int) [][]byte {
	if loraName == "" || blocks <= 0 {
		return nil
	}
	b := []byte{0x91}
	switch n := len(loraName); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n < 1<<8:
		b = append(b, 0xd9, byte(n))
	case n < 1<<16:
		b = append(b, 0xda, byte(n>>8), byte(n))
	default:
		b = append(b, 0xdb, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	b = append(b, loraName...)
	out := make([][]byte, blocks)
	for i := range out {
		out[i] = b
	}
	return out
}

type run struct {
	engine         uint32
	medium         uint16 // anyMedium: the engine's run on any medium
	next           int32  // the engine's next medium run, -1 for none
	maybe, certain int32
}

const anyMedium = 0xffff

// scoreScratch is one Score's working memory, pooled. byEngine[e] is 1 +
// the index in runs of engine e's any-medium run (0: none yet); an
// engine's medium runs follow it through next.
type scoreScratch struct {
	keys     []Key
	runs     []run
	byEngine []int32
	lanes    [walkLanes][]walkHolder // the memory backend's walk buffers
	// names, when not nil, are the engine names as of the walk (the
	// memory backend's walk sets it): the runs' numbers resolve from it,
	// not from the backend's later names (a number freed and reused since
	// would name another engine).
	names *[]string
}

// engineName returns the name of engine number id for the walk in sc.
func (sc *scoreScratch) engineName(be Backend, id uint32) string {
	if sc.names == nil {
		return be.EngineName(id)
	}
	if int(id) < len(*sc.names) {
		return (*sc.names)[id]
	}
	return ""
}

// step extends engine's runs (any medium, and medium) with block i; it
// reports whether the any-medium run reached i+1.
func (sc *scoreScratch) step(i int32, engine uint32, medium uint16, trusted bool) bool {
	if i > 0 {
		// The common case after the first block: an engine with no run,
		// or one that already stopped, costs two loads.
		if int(engine) >= len(sc.byEngine) {
			return false
		}
		j := sc.byEngine[engine] - 1
		if j < 0 || sc.runs[j].maybe < i {
			return false
		}
	}
	if int(engine) >= len(sc.byEngine) {
		if i != 0 {
			return false
		}
		sc.byEngine = append(sc.byEngine, make([]int32, int(engine)+1-len(sc.byEngine))...)
	}
	j := sc.byEngine[engine] - 1
	if j < 0 {
		if i != 0 {
			return false
		}
		j = int32(len(sc.runs))
		sc.runs = append(sc.runs, run{engine: engine, medium: anyMedium, next: -1})
		sc.byEngine[engine] = j + 1
	}
	if !extend(&sc.runs[j], i, trusted) {
		return false
	}
	// The medium's run: in the engine's short list.
	k := sc.runs[j].next
	for k >= 0 && sc.runs[k].medium != medium {
		k = sc.runs[k].next
	}
	if k < 0 {
		if i != 0 {
			return true
		}
		k = int32(len(sc.runs))
		sc.runs = append(sc.runs, run{engine: engine, medium: medium, next: sc.runs[j].next})
		sc.runs[j].next = k
	}
	extend(&sc.runs[k], i, trusted)
	return true
}

// extend adds block i to r if r holds blocks 0..i-1 (or already i).
func extend(r *run, i int32, trusted bool) bool {
	if r.maybe == i {
		r.maybe++
	}
	if r.maybe != i+1 {
		return false
	}
	if trusted && r.certain == i {
		r.certain++
	}
	return true
}

func (sc *scoreScratch) reset() {
	for _, r := range sc.runs {
		if int(r.engine) < len(sc.byEngine) {
			sc.byEngine[r.engine] = 0
		}
	}
	sc.runs = sc.runs[:0]
}

// Score returns, for every engine holding a prefix of the prompt, the
// longest prefix it holds (on any medium, and on each medium), certain and
// maybe. A block counts for an (engine, medium) when the engine holds it
// there in any KV-cache group.
func (x *Index) Score(req ScoreRequest) (ScoreResult, error) {
	var res ScoreResult
	if x.closed.Load() {
		return res, ErrClosed
	}
	if len(req.Tokens) > MaxScoreTokens {
		return res, fmt.Errorf("kvindex: prompt of %d tokens is over %d", len(req.Tokens), MaxScoreTokens)
	}
	if req.BlockSize < 0 || req.BlockSize > MaxBlockSize {
		return res, fmt.Errorf("kvindex: block size %d out of range", req.BlockSize)
	}
	x.st.scores.Add(1)
	if !x.knownModel(req.Model) {
		res.UnknownModel = true
		x.st.unknownModels.Add(1)
	}
	var sizes []int
	if req.BlockSize > 0 {
		sizes = []int{req.BlockSize}
	} else {
		x.spaceMu.RLock()
		sizes = x.spaces[req.Model]
		x.spaceMu.RUnlock()
		if len(sizes) == 0 {
			sizes = []int{x.cfg.BlockSize}
		}
	}
	sc, _ := x.scratch.Get().(*scoreScratch)
	if sc == nil {
		sc = &scoreScratch{}
	}
	defer x.scratch.Put(sc)
	res.PromptBlocks = len(req.Tokens) / sizes[0]
	lora := kvkey.Lora(x.seed, req.LoraName)
	for _, bs := range sizes {
		if x.cfg.Keys != nil {
			r := req // a copy: &req would move every Score's request to the heap
			keys, err := x.cfg.Keys(&r, bs, sc.keys[:0])
			if err != nil {
				return ScoreResult{}, err
			}
			sc.keys = keys
		} else {
			root := kvkey.Keyspace(x.seed, req.Model, bs)
			sc.keys = kvkey.Chain(x.seed, root, 0, false, lora, req.ExtraKeys, bs, req.Tokens, sc.keys[:0])
		}
		if len(sc.keys) == 0 {
			continue
		}
		sc.reset()
		sc.names = nil
		var err error
		if hw, ok := x.be.(holderWalker); ok {
			err = hw.walk(sc.keys, sc)
		} else {
			holders := x.be.Holders
			if pw, ok := x.be.(PrefixWalker); ok {
				holders = pw.PrefixHolders
			}
			err = holders(sc.keys, func(i int, hs []Holder) bool {
				ext := false
				for _, h := range hs {
					if sc.step(int32(i), h.Engine, h.Medium, h.Trusted) {
						ext = true
					}
				}
				return ext
			})
		}
		if err != nil {
			x.failed("holders", "", err)
			return ScoreResult{}, err
		}
		if x.afterWalk != nil {
			x.afterWalk() // tests only: between the walk and the names
		}
		// One EngineScore per any-medium run, its tiers from one slab.
		nEng, nTier := 0, 0
		for _, r := range sc.runs {
			if r.medium == anyMedium {
				nEng++
			} else {
				nTier++
			}
		}
		res.Engines = slices.Grow(res.Engines, nEng)
		tiers := make([]Tier, 0, nTier)
		for _, r := range sc.runs {
			if r.medium != anyMedium {
				continue
			}
			first := len(tiers)
			for k := r.next; k >= 0; k = sc.runs[k].next {
				mr := sc.runs[k]
				if mr.maybe > 0 {
					tiers = append(tiers, Tier{Medium: x.be.MediumName(mr.medium), Prefix: prefix(mr, bs)})
				}
			}
			ts := tiers[first:len(tiers):len(tiers)]
			slices.SortFunc(ts, func(a, b Tier) int { return cmp.Compare(a.Medium, b.Medium) })
			res.Engines = append(res.Engines, EngineScore{Engine: sc.engineName(x.be, r.engine), BlockSize: bs,
				Prefix: prefix(r, bs), Tiers: ts})
		}
	}
	sc.reset()
	sc.names = nil
	// An engine number the backend no longer names (a shared store's
	// number from before it lost its data: redisstore's rule) is left out:
	// an answer names an engine or nothing, never a number's stale owner.
	res.Engines = slices.DeleteFunc(res.Engines, func(e EngineScore) bool {
		return e.Engine == "" || len(req.Engines) > 0 && !slices.Contains(req.Engines, e.Engine)
	})
	sortEngines(res.Engines)
	return res, nil
}

// knownModel reports whether an engine the index knows serves model.
func (x *Index) knownModel(model string) bool {
	if x.cfg.ModelOf == nil {
		return model == x.cfg.Model
	}
	x.mu.Lock()
	n := x.models[model]
	x.mu.Unlock()
	if n > 0 {
		return true
	}
	x.spaceMu.RLock()
	defer x.spaceMu.RUnlock()
	_, ok := x.spaces[model]
	return ok
}

func prefix(r run, bs int) Prefix {
	return Prefix{Blocks: int(r.certain), Tokens: int(r.certain) * bs, MaybeBlocks: int(r.maybe), MaybeTokens: int(r.maybe) * bs}
}

// sortEngines sorts engine scores in Score's order.
func sortEngines(es []EngineScore) {
	slices.SortFunc(es, func(a, b EngineScore) int {
		if c := cmp.Compare(b.Tokens, a.Tokens); c != 0 {
			return c
		}
		if c := cmp.Compare(b.MaybeTokens, a.MaybeTokens); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Engine, b.Engine); c != 0 {
			return c
		}
		return cmp.Compare(a.BlockSize, b.BlockSize)
	})
}

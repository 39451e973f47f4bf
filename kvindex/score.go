package kvindex

import (
	"cmp"
	"fmt"
	"slices"
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
}

// Match is one engine's cached prefix of the prompt on one medium.
type Match struct {
	// Engine is the engine (source) name, Medium the tier.
	Engine string
	Medium string
	// BlockSize is the block size of the match.
	BlockSize int
	// Blocks is the longest prefix of the prompt the engine certainly
	// holds on Medium, in blocks; Tokens the same in tokens.
	Blocks, Tokens int
	// MaybeBlocks (≥ Blocks) counts as well blocks whose entries are
	// uncertain (stored before a lost range and not stored since): the
	// engine may no longer hold them. MaybeTokens in tokens.
	MaybeBlocks, MaybeTokens int
}

// ScoreResult is what Score finds.
type ScoreResult struct {
	// PromptBlocks is the number of full blocks of the prompt, at the
	// smallest block size scored.
	PromptBlocks int
	// Matches holds every (engine, medium, block size) with a prefix of at
	// least one block, certain or not: most certain tokens first, then
	// most maybe tokens, then by engine and medium name.
	Matches []Match
}

// Best returns the match with the most certain tokens (ties: most maybe
// tokens), and false when there is none with a certain block.
func (r ScoreResult) Best() (Match, bool) {
	if len(r.Matches) == 0 || r.Matches[0].Blocks == 0 {
		return Match{}, false
	}
	return r.Matches[0], true
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
	medium         uint16
	maybe, certain int32
}

type scoreScratch struct {
	keys []Key
	runs []run
	at   map[uint64]int32
}

// Score returns, for every engine holding a prefix of the prompt, the
// longest prefix it holds on each medium, certain and maybe. A block
// counts for an (engine, medium) when the engine holds it there in any
// KV-cache group.
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
		sc = &scoreScratch{at: map[uint64]int32{}}
	}
	defer x.scratch.Put(sc)
	res.PromptBlocks = len(req.Tokens) / sizes[0]
	lora := hashLora(x.seed, req.LoraName)
	for _, bs := range sizes {
		root := keyspace(x.seed, req.Model, bs)
		sc.keys = blockKeys(x.seed, root, 0, false, lora, req.ExtraKeys, bs, req.Tokens, sc.keys[:0])
		if len(sc.keys) == 0 {
			continue
		}
		sc.runs = sc.runs[:0]
		clear(sc.at)
		err := x.be.Holders(sc.keys, func(i int, hs []Holder) bool {
			ext := false
			for _, h := range hs {
				id := uint64(h.Engine)<<16 | uint64(h.Medium)
				j, ok := sc.at[id]
				if !ok {
					if i != 0 {
						continue
					}
					j = int32(len(sc.runs))
					sc.runs = append(sc.runs, run{engine: h.Engine, medium: h.Medium})
					sc.at[id] = j
				}
				r := &sc.runs[j]
				if r.maybe == int32(i) {
					r.maybe++
				}
				if r.maybe == int32(i)+1 {
					ext = true
					if h.Trusted && r.certain == int32(i) {
						r.certain++
					}
				}
			}
			return ext
		})
		if err != nil {
			x.st.errors.Add(1)
			return ScoreResult{}, err
		}
		for _, r := range sc.runs {
			res.Matches = append(res.Matches, Match{Engine: x.be.EngineName(r.engine), Medium: x.be.MediumName(r.medium),
				BlockSize: bs, Blocks: int(r.certain), Tokens: int(r.certain) * bs,
				MaybeBlocks: int(r.maybe), MaybeTokens: int(r.maybe) * bs})
		}
	}
	if len(sc.at) > 1<<12 {
		sc.at = map[uint64]int32{}
	}
	slices.SortFunc(res.Matches, func(a, b Match) int {
		if c := cmp.Compare(b.Tokens, a.Tokens); c != 0 {
			return c
		}
		if c := cmp.Compare(b.MaybeTokens, a.MaybeTokens); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Engine, b.Engine); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Medium, b.Medium); c != 0 {
			return c
		}
		return cmp.Compare(a.BlockSize, b.BlockSize)
	})
	return res, nil
}

package main

// The JSON bodies of kv-index's POST /score.

import "github.com/zmqguard/zmqguard/kvindex"

// kvIndexMaxBody bounds a /score request body: kvindex.MaxScoreTokens
// token ids of up to 7 digits and a separator each, and the rest.
const kvIndexMaxBody = 8<<20 + 4096

// kvScoreRequest is the body of POST /score.
type kvScoreRequest struct {
	Tokens    []int64  `json:"tokens"`
	Lora      string   `json:"lora,omitempty"`
	Model     *string  `json:"model,omitempty"`
	BlockSize int      `json:"block_size,omitempty"`
	Engines   []string `json:"engines,omitempty"`
}

// kvPrefix is a cached prefix: certain blocks and tokens, and with the
// uncertain ones (maybe).
type kvPrefix struct {
	Blocks      int `json:"blocks"`
	Tokens      int `json:"tokens"`
	MaybeBlocks int `json:"maybe_blocks"`
	MaybeTokens int `json:"maybe_tokens"`
}

// kvTier is one engine's prefix on one medium alone.
type kvTier struct {
	Medium string `json:"medium"`
	kvPrefix
}

// kvEngineScore is one engine's prefix on any medium, and per medium.
type kvEngineScore struct {
	Engine    string `json:"engine"`
	BlockSize int    `json:"block_size"`
	kvPrefix
	Tiers []kvTier `json:"tiers"`
}

// kvScoreResponse is the body POST /score answers.
type kvScoreResponse struct {
	Model        string          `json:"model"`
	PromptBlocks int             `json:"prompt_blocks"`
	Best         *kvEngineScore  `json:"best"`
	Engines      []kvEngineScore `json:"engines"`
	UnknownModel bool            `json:"unknown_model,omitempty"`
}

func toPrefix(p kvindex.Prefix) kvPrefix {
	return kvPrefix{Blocks: p.Blocks, Tokens: p.Tokens, MaybeBlocks: p.MaybeBlocks, MaybeTokens: p.MaybeTokens}
}

// toScoreResponse renders Score's answer (its order kept: most certain
// tokens first).
func toScoreResponse(model string, r kvindex.ScoreResult) kvScoreResponse {
	out := kvScoreResponse{Model: model, PromptBlocks: r.PromptBlocks, Engines: make([]kvEngineScore, 0, len(r.Engines)),
		UnknownModel: r.UnknownModel}
	for _, e := range r.Engines {
		es := kvEngineScore{Engine: e.Engine, BlockSize: e.BlockSize, kvPrefix: toPrefix(e.Prefix), Tiers: make([]kvTier, 0, len(e.Tiers))}
		for _, t := range e.Tiers {
			es.Tiers = append(es.Tiers, kvTier{Medium: t.Medium, kvPrefix: toPrefix(t.Prefix)})
		}
		out.Engines = append(out.Engines, es)
	}
	if _, ok := r.Best(); ok {
		b := out.Engines[0]
		out.Best = &b
	}
	return out
}

package vllmhash

import (
	"crypto/sha256"
	"fmt"

	"github.com/zmqguard/zmqguard/kvindex"
)

// MMFeature is one multimodal item of a request: its identifier (vLLM's
// mm_hash or the user-supplied uuid) and the span of placeholder tokens it
// occupies in the prompt.
type MMFeature struct {
	Identifier string
	Offset     int
	Length     int
}

// Request holds what vLLM's generate_block_hash_extra_keys reads from a
// request, and its prompt's token ids.
type Request struct {
	// TokenIDs is the prompt's token ids.
	TokenIDs []int64
	// LoRAName is the LoRA adapter's name, "" for none.
	LoRAName string
	// MMFeatures are the multimodal items sorted by Offset, as vLLM keeps them.
	MMFeatures []MMFeature
	// CacheSalt is the request's cache salt, "" for none.
	CacheSalt string
	// PromptEmbeds is the raw little-endian bytes of the prompt embeddings
	// tensor (C order), nil for none; EmbedsRowBytes is the bytes of one
	// token's row (hidden size × element size).
	PromptEmbeds   []byte
	EmbedsRowBytes int
}

func (r *Request) check() error {
	prev := 0
	for i, f := range r.MMFeatures {
		if f.Offset < 0 || f.Length <= 0 {
			return fmt.Errorf("vllmhash: mm feature %d has offset %d length %d (want offset >= 0, length > 0)", i, f.Offset, f.Length)
		}
		if f.Offset < prev {
			return fmt.Errorf("vllmhash: mm feature %d offset %d is before the previous one's %d (must be sorted)", i, f.Offset, prev)
		}
		prev = f.Offset
	}
	if r.PromptEmbeds != nil {
		if r.EmbedsRowBytes <= 0 {
			return fmt.Errorf("vllmhash: prompt embeds with row size %d (want > 0)", r.EmbedsRowBytes)
		}
		if len(r.PromptEmbeds) != len(r.TokenIDs)*r.EmbedsRowBytes {
			return fmt.Errorf("vllmhash: prompt embeds are %d bytes, want %d tokens × %d", len(r.PromptEmbeds), len(r.TokenIDs), r.EmbedsRowBytes)
		}
	}
	return nil
}

// blockExtraKeys returns the extra keys of the block of r spanning tokens
// [start, end), as vLLM's generate_block_hash_extra_keys builds them: the
// LoRA name, the multimodal items overlapping the block (with offsets
// relative to start), the cache salt when start is 0, and the SHA-256 of the
// block's prompt embeddings. r's multimodal items must be sorted by offset.
func blockExtraKeys(r *Request, start, end int) extraKeys {
	var e extraKeys
	e.LoRAName = r.LoRAName
	for _, f := range r.MMFeatures {
		if f.Offset >= end {
			break // sorted: no later item reaches this block
		}
		if start >= f.Offset+f.Length {
			continue // the block is past this item
		}
		e.MM = append(e.MM, mmKey{Identifier: f.Identifier, Offset: int64(f.Offset - start)})
		if end < f.Offset+f.Length {
			break // the item runs past the block: vLLM stops here
		}
	}
	if start == 0 {
		e.CacheSalt = r.CacheSalt
	}
	if r.PromptEmbeds != nil && r.EmbedsRowBytes > 0 {
		lo, hi := start*r.EmbedsRowBytes, end*r.EmbedsRowBytes
		if lo >= 0 && hi <= len(r.PromptEmbeds) && lo <= hi {
			d := sha256.Sum256(r.PromptEmbeds[lo:hi])
			e.EmbedsDigest = d[:]
		}
	}
	return e
}

// Request returns the hashes of r's full blocks of blockSize tokens, chained
// from NONE_HASH, as vLLM's request block hasher computes them.
func (h *Hasher) Request(r *Request, blockSize int) ([]Digest, error) {
	if blockSize <= 0 {
		return nil, fmt.Errorf("vllmhash: block size %d (want > 0)", blockSize)
	}
	if err := r.check(); err != nil {
		return nil, err
	}
	n := len(r.TokenIDs) / blockSize
	out := make([]Digest, 0, n)
	var buf []byte
	parent := h.none
	for i := range n {
		start, end := i*blockSize, (i+1)*blockSize
		var err error
		buf, err = preimage(buf[:0], h.algo, parent[:], r.TokenIDs[start:end], blockExtraKeys(r, start, end))
		if err != nil {
			return nil, err
		}
		parent = sha256.Sum256(buf)
		out = append(out, parent)
	}
	return out, nil
}

// Keys is a kvindex.Config.Keys for engines that hash as h does: it
// appends to dst the KV-event form ([Digest.Uint64]) of vLLM's hashes of
// req.Tokens' full blocks of blockSize tokens. A *Request in req.Request
// supplies the LoRA name, multimodal items, cache salt and prompt
// embeddings (its TokenIDs are not read); without one the LoRA name is
// req.LoraName.
func (h *Hasher) Keys(req *kvindex.ScoreRequest, blockSize int, dst []kvindex.Key) ([]kvindex.Key, error) {
	r := Request{TokenIDs: req.Tokens, LoRAName: req.LoraName}
	if o, ok := req.Request.(*Request); ok && o != nil {
		r = *o
		r.TokenIDs = req.Tokens
	}
	ds, err := h.Request(&r, blockSize)
	if err != nil {
		return dst, err
	}
	for _, d := range ds {
		dst = append(dst, kvindex.Key(d.Uint64()))
	}
	return dst, nil
}

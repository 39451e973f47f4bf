package kvindex

import "github.com/zmqguard/zmqguard/internal/ref/kvkey"

// Names the external tests use that users do not need.

// KeyParams are what a block's local key depends on besides its tokens.
type KeyParams = kvkey.Params[Key]

// BlockKeys appends to dst the local keys of tokens' full blocks.
func BlockKeys(p KeyParams, tokens []int64, dst []Key) []Key { return kvkey.BlockKeys(p, tokens, dst) }

const (
	DefaultBlockSize = defaultBlockSize
	MaxGroup         = kvkey.MaxGroup
	MaxMediumLen     = kvkey.MaxMediumLen
	MaxMediums       = kvkey.MaxMediums
)

// embedded is a Backend that embeds the in-memory backend, as a wrapper
// inside this package would: it keeps the optional interfaces
// (backendopt.go) through the embedding.
type embedded struct{ *memory }

// Embedded wraps b, from NewMemory, in a type of its own that embeds it.
func Embedded(b Backend) Backend { return embedded{b.(*memory)} }

// EnginesTracked is how many engines the index keeps state for.
func EnginesTracked(x *Index) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.engines)
}

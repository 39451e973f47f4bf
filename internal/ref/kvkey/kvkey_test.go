package kvkey_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/zmqguard/zmqguard/internal/ref/kvkey"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestPartialKind: the kinds whose blocks hold no whole prefix (vLLM PR
// #40984's kv_cache_spec_kind values) are partial; full attention, MLA and
// an empty kind are not.
func TestPartialKind(t *testing.T) {
	for kind, want := range map[string]bool{
		"sliding_window": true, "sliding_window_mla": true, "mamba": true, "chunked_local_attention": true,
		"encoder_only_attention": true, "cross_attention": true,
		"full_attention": false, "mla_attention": false, "": false,
	} {
		if got := kvkey.PartialKind(kind); got != want {
			t.Errorf("kind %q: partial %v, want %v", kind, got, want)
		}
	}
}

// TestBlockKeysGeneric: the key type is the caller's; the keys are the
// same whatever it is, and a partial last block has none.
func TestBlockKeysGeneric(t *testing.T) {
	type myKey uint64
	toks := make([]int64, 40)
	for i := range toks {
		toks[i] = int64(i * 3)
	}
	a := kvkey.BlockKeys(kvkey.Params[uint64]{Model: "m", BlockSize: 16}, toks, nil)
	b := kvkey.BlockKeys(kvkey.Params[myKey]{Model: "m", BlockSize: 16, Seed: kvkey.DefaultSeed}, toks, nil)
	if len(a) != 2 || len(b) != 2 || a[0] != uint64(b[0]) || a[1] != uint64(b[1]) {
		t.Fatalf("keys %x and %x", a, b)
	}
	if got := kvkey.BlockKeys(kvkey.Params[uint64]{}, toks, nil); got != nil {
		t.Fatalf("block size 0 gave keys %x", got)
	}
}

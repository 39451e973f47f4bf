package vllmhash_test

import (
	"fmt"

	"github.com/zmqguard/zmqguard/kvindex/vllmhash"
)

// The hashes an engine running with --prefix-caching-hash-algo sha256_cbor
// and PYTHONHASHSEED=0 gives a LoRA request's two full blocks, and the ints
// its KV events carry for them.
func Example() {
	h, err := vllmhash.New("sha256_cbor", "0")
	if err != nil {
		panic(err)
	}
	tokens := make([]int64, 40) // two full blocks of 16; the last 8 are not hashed
	for i := range tokens {
		tokens[i] = int64(1000 + i)
	}
	hashes, err := h.Request(&vllmhash.Request{TokenIDs: tokens, LoRAName: "sql-lora"}, 16)
	if err != nil {
		panic(err)
	}
	for i, d := range hashes {
		fmt.Printf("block %d: %s… event int %d\n", i, d.String()[:16], d.Uint64())
	}
	// Output:
	// block 0: f5d9d81376fa2435… event int 10613363399970702898
	// block 1: 1fd896b320a502bf… event int 15785898330339428247
}

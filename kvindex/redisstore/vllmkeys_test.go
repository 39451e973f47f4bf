package redisstore

import (
	"testing"

	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
	"github.com/zmqguard/zmqguard/kvindex/vllmhash"
)

// TestVLLMKeyModeOnRedis: vLLM-key mode (kvindex.Config.Keys = vllmhash Hasher.Keys) over a store:
// routing by vLLM's hashes, a lost range (maybe, never certain), a reset.
func TestVLLMKeyModeOnRedis(t *testing.T) {
	h, err := vllmhash.New("sha256_cbor", "0")
	if err != nil {
		t.Fatal(err)
	}
	const bs = 16
	x, err := kvindex.New(kvindex.Config{Keys: h.Keys, BlockSize: bs, Backend: newStore(t, Config{})})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	tokens := make([]int64, 6*bs)
	for i := range tokens {
		tokens[i] = int64(7 + i)
	}
	ds, err := h.Request(&vllmhash.Request{TokenIDs: tokens}, bs)
	if err != nil {
		t.Fatal(err)
	}
	stored := func(n int) kvevents.Event {
		ev := kvevents.Event{Type: kvevents.BlockStored, TokenIDs: tokens[:n*bs], BlockSize: bs, Medium: kvevents.Some("GPU")}
		for _, d := range ds[:n] {
			ev.BlockHashes = append(ev.BlockHashes, kvevents.IntHash(d.Uint64()))
		}
		return ev
	}
	if err := x.ApplyEvents("a", []kvevents.Event{stored(6)}); err != nil {
		t.Fatal(err)
	}
	if err := x.ApplyEvents("b", []kvevents.Event{stored(2)}); err != nil {
		t.Fatal(err)
	}
	score := func() (string, int, int) {
		r, err := x.Score(kvindex.ScoreRequest{Tokens: tokens})
		if err != nil {
			t.Fatal(err)
		}
		best, _ := r.Best()
		return best.Engine, best.Blocks, len(r.Engines)
	}
	if e, n, engines := score(); e != "a" || n != 6 || engines != 2 {
		t.Fatalf("best %s %d of %d engines, want a 6 of 2", e, n, engines)
	}
	x.Apply(kvevents.Update{Kind: kvevents.UpdateLost, Source: "a", From: 1, To: 2})
	if e, n, _ := score(); e != "b" || n != 2 {
		t.Fatalf("after a's lost range best %s %d, want b 2", e, n)
	}
	x.Apply(kvevents.Update{Kind: kvevents.UpdateReset, Source: "b"})
	if e, n, engines := score(); e != "" || n != 0 || engines != 1 {
		t.Fatalf("after b's reset best %q %d of %d engines, want none certain of 1", e, n, engines)
	}
}

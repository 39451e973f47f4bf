package kvevents

import "testing"

// TestDefaultLimitsHoldFullReportMode: a step in vLLM's "full" report mode
// (PR #45261) where 64 requests sharing a 32k-token prompt hit the prefix
// cache re-announces the prompt once per request: about 10 MiB, which the
// default limits accept (the old 8 MiB default refused it).
func TestDefaultLimitsHoldFullReportMode(t *testing.T) {
	const requests, blocks, bs = 64, 2048, 16
	prompt := make([]int64, blocks*bs)
	for i := range prompt {
		prompt[i] = 100000 + int64(i)%50000 // 5-byte token ids
	}
	hashes := make([]Hash, blocks)
	for i := range hashes {
		hashes[i] = IntHash(uint64(i)*0x9e3779b97f4a7c15 | 1<<63)
	}
	evs := make([]Event, requests)
	for i := range evs {
		evs[i] = Event{Type: BlockStored, BlockHashes: hashes, TokenIDs: prompt, BlockSize: bs,
			Medium: Some("GPU"), GroupIdx: Some[int64](0), KVCacheSpecKind: Some("full_attention")}
	}
	p := AppendBatch(nil, 1, evs, Some[int64](0), true)
	if len(p) <= 8<<20 || len(p) > defaultMaxPayload {
		t.Fatalf("payload of %d bytes: the test wants one between 8 MiB and defaultMaxPayload", len(p))
	}
	var b Batch
	if err := decodeBatch(p, limits{}, &b, nil); err != nil || len(b.Events) != requests || b.DroppedEvents != 0 {
		t.Fatalf("%v: %d events, %d dropped", err, len(b.Events), b.DroppedEvents)
	}
	if err := decodeBatch(p, limits{MaxPayload: 8 << 20}, &b, nil); err == nil {
		t.Fatal("an 8 MiB limit accepted it")
	}
}

package kvevents

import (
	"bytes"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"slices"
	"testing"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/testkit/golden"
)

// decodeResult is what one decode yields, for comparing two decoders.
type decodeResult struct {
	err   error
	b     *Batch
	drops []eventDrop
}

func decodeWith(dec func([]byte, limits, *Batch, func(eventDrop)) error, p []byte, lim limits, b *Batch) decodeResult {
	r := decodeResult{b: b}
	r.err = dec(p, lim, b, func(d eventDrop) { r.drops = append(r.drops, d) })
	return r
}

// sameResult reports how two decodes differ ("" when they agree): the same
// refusal (reason and text), or the same batch and the same event drops.
func sameResult(x, y decodeResult) string {
	if (x.err == nil) != (y.err == nil) {
		return fmt.Sprintf("errors differ: %v / %v", x.err, y.err)
	}
	if x.err != nil {
		if x.err.Error() != y.err.Error() || decodeguard.ReasonOf(x.err) != decodeguard.ReasonOf(y.err) {
			return fmt.Sprintf("errors differ: %v / %v", x.err, y.err)
		}
		return sameDrops(x.drops, y.drops)
	}
	a, b := x.b, y.b
	if math.Float64bits(a.TS) != math.Float64bits(b.TS) || a.DataParallelRank != b.DataParallelRank ||
		a.DroppedEvents != b.DroppedEvents || !slices.Equal(a.Index, b.Index) || len(a.Events) != len(b.Events) ||
		a.UnknownFields != b.UnknownFields {
		return fmt.Sprintf("batch differs: ts %v/%v rank %v/%v dropped %d/%d index %v/%v unknown %d/%d",
			a.TS, b.TS, a.DataParallelRank, b.DataParallelRank, a.DroppedEvents, b.DroppedEvents, a.Index, b.Index,
			a.UnknownFields, b.UnknownFields)
	}
	for i := range a.Events {
		if d := sameEvent(&a.Events[i], &b.Events[i]); d != "" {
			return fmt.Sprintf("event %d: %s", i, d)
		}
	}
	return sameDrops(x.drops, y.drops)
}

// sameDrops compares the event drops two decodes reported (the two-pass
// path reports the drops before a batch-level refusal found after them, and
// DecodeBatch, which then decides the batch with it, does the same).
func sameDrops(x, y []eventDrop) string {
	if len(x) != len(y) {
		return fmt.Sprintf("%d / %d drops", len(x), len(y))
	}
	for i := range x {
		p, q := x[i], y[i]
		if p.Index != q.Index || p.Type != q.Type || p.Err.Error() != q.Err.Error() ||
			decodeguard.ReasonOf(p.Err) != decodeguard.ReasonOf(q.Err) {
			return fmt.Sprintf("drop %d differs: %+v / %+v", i, p, q)
		}
	}
	return ""
}

// sameEvent compares two events field by field (a nil and an empty slice
// are the same).
func sameEvent(a, b *Event) string {
	if !slices.Equal(a.BlockHashes, b.BlockHashes) {
		return fmt.Sprintf("block_hashes %v / %v", a.BlockHashes, b.BlockHashes)
	}
	if !slices.Equal(a.TokenIDs, b.TokenIDs) {
		return fmt.Sprintf("token_ids %v / %v", a.TokenIDs, b.TokenIDs)
	}
	if !slices.EqualFunc(a.ExtraKeys, b.ExtraKeys, bytes.Equal) {
		return fmt.Sprintf("extra_keys %x / %x", a.ExtraKeys, b.ExtraKeys)
	}
	x, y := *a, *b
	x.BlockHashes, x.TokenIDs, x.ExtraKeys = nil, nil, nil
	y.BlockHashes, y.TokenIDs, y.ExtraKeys = nil, nil, nil
	if !reflect.DeepEqual(x, y) {
		return fmt.Sprintf("%+v / %+v", x, y)
	}
	return ""
}

// checkDifferential decodes p with the oracle (decodeChecked: the
// pre-scan then msgp's readers, as DecodeBatch did before the one-pass
// decoder) and with DecodeBatch, each into a Batch that already held
// another batch, and fails on any difference. It returns DecodeBatch's
// error.
func checkDifferential(t testing.TB, p []byte, lim limits) error {
	t.Helper()
	warm, _ := realisticBatch(7)
	var b1, b2 Batch
	for _, b := range []*Batch{&b1, &b2} {
		if err := decodeBatch(warm, limits{}, b, nil); err != nil {
			t.Fatal(err)
		}
	}
	old := decodeWith(decodeChecked, p, lim, &b1)
	now := decodeWith(decodeBatch, p, lim, &b2)
	if d := sameResult(old, now); d != "" {
		t.Fatalf("DecodeBatch differs from the oracle (pre-scan + decode) on %x: %s", p, d)
	}
	return now.err
}

// FuzzDecodeMatchesOracle proves the one-pass decoder refuses exactly what
// the oracle, the checked pre-scan + decode path, refuses (same reason, same
// text) and yields the same batch and event drops for what it accepts, with the default limits
// and with small ones, each also as an SGLang source's with BlockInactive
// decoded (limits.SGLang, limits.Inactive).
func FuzzDecodeMatchesOracle(f *testing.F) {
	f.Add(batchOf(f, vecStoredMap, vecRemovedMap, vecClearedMap), false)
	f.Add(unhex(f, vecBatch), true)
	p, _ := realisticBatch(3)
	f.Add(p, false)
	for _, p := range rareShapes() {
		f.Add(p, false)
	}
	for _, v := range golden.LoadSGLang(f, "kv-events") {
		if frames, err := v.Frames(); err == nil && len(frames) == 3 && len(frames[2]) > 0 {
			f.Add(frames[2], false)
		}
	}
	f.Fuzz(func(t *testing.T, p []byte, small bool) {
		lim := limits{}
		if small {
			lim = limits{MaxPayload: 2048, MaxEvents: 4}
		}
		checkDifferential(t, p, lim)
		lim.SGLang, lim.Inactive = true, true
		checkDifferential(t, p, lim)
	})
}

// TestDifferentialGolden runs the differential check over vLLM's own
// batches and requires the one-pass decoder to take every one of them.
func TestDifferentialGolden(t *testing.T) {
	n := 0
	for _, v := range golden.Load(t, "kv-events") {
		frames, err := v.Frames()
		if err != nil {
			t.Fatal(err)
		}
		if len(frames) != 3 {
			continue
		}
		if err := checkDifferential(t, frames[2], limits{}); err != nil {
			t.Errorf("vector %s: vLLM's batch refused: %v", v.ID, err)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no kv-events batch among the golden vectors")
	}
	// SGLang's batches, read as any source's and as an SGLang source's.
	n = 0
	for _, v := range golden.LoadSGLang(t, "kv-events") {
		frames, err := v.Frames()
		if err != nil {
			t.Fatal(err)
		}
		if len(frames) != 3 || len(frames[2]) == 0 {
			continue
		}
		for _, lim := range []limits{{}, {SGLang: true}} {
			if err := checkDifferential(t, frames[2], lim); err != nil {
				t.Errorf("vector %s: SGLang's batch refused (%+v): %v", v.ID, lim, err)
			}
		}
		n++
	}
	if n != 25 {
		t.Fatalf("%d SGLang batches, want 25 (22 live, 3 replayed)", n)
	}
}

// TestDifferentialShapes runs the differential check over the encoder's
// batches in both forms and over hand-made edge cases, and requires the
// one-pass decoder to take the encoder's output.
func TestDifferentialShapes(t *testing.T) {
	ek := []byte{0x92, 0xa1, 'x', 0x01}
	events := []Event{
		{Type: BlockStored, BlockHashes: []Hash{IntHash(1), IntHash(math.MaxUint64)}, TokenIDs: make([]int64, 32), BlockSize: 16,
			LoraID: Some[int64](3), LoraName: Some("adapter-α"), Medium: Some("GPU"), HasExtraKeys: true, ExtraKeys: [][]byte{ek, nil},
			GroupIdx: Some[int64](1), KVCacheSpecKind: Some("sliding_window"), KVCacheSpecSlidingWindow: Some[int64](4096),
			Locality: Some("LOCAL"), Ownership: Some("tier-x"), SessionID: Some("sess-1")},
		{Type: BlockStored, BlockHashes: []Hash{mustBytesHash(t, bytes.Repeat([]byte{7}, 32))}, BlockSize: 0, Medium: Some("CPU")},
		{Type: BlockRemoved, BlockHashes: []Hash{IntHash(1 << 40)}, Medium: Some("DISK"), GroupIdx: Some[int64](2)},
		{Type: AllBlocksCleared},
		{Type: BlockStored, BlockHashes: []Hash{IntHash(1)}, TokenIDs: []int64{1, 2, 3}, BlockSize: 2}, // fails validation
		// A negative integer, read by the signed readers.
		{Type: BlockRemoved, BlockHashes: []Hash{IntHash(3)}, GroupIdx: Some[int64](-2)},
	}
	for i := range events[0].TokenIDs {
		events[0].TokenIDs[i] = int64(i) * 70001
	}
	for _, mapForm := range []bool{true, false} {
		p := AppendBatch(nil, 1.5, events, Some[int64](0), mapForm)
		if err := checkDifferential(t, p, limits{}); err != nil {
			t.Errorf("mapForm=%v: the encoder's batch refused: %v", mapForm, err)
		}
		checkDifferential(t, append(append([]byte(nil), p...), 0xc0), limits{})
		checkDifferential(t, p, limits{MaxEvents: 2})
		checkDifferential(t, p, limits{MaxPayload: len(p) - 1})
		for cut := 0; cut < len(p); cut++ {
			checkDifferential(t, p[:cut], limits{})
		}
		// Every byte replaced by type bytes that change the structure.
		for i := range p {
			for _, c := range []byte{0x00, 0x7f, 0x80, 0x91, 0xa3, 0xc0, 0xc1, 0xc4, 0xcb, 0xcd, 0xd0, 0xd4, 0xd9, 0xdc, 0xdf, 0xff} {
				q := append([]byte(nil), p...)
				q[i] = c
				checkDifferential(t, q, limits{})
			}
		}
	}
}

func mustBytesHash(t testing.TB, b []byte) Hash {
	h, ok := BytesHash(b)
	if !ok {
		t.Fatal("bad hash")
	}
	return h
}

// TestDecodeBatchNoAllocs requires DecodeBatch to allocate nothing once its
// Batch is warm: a realistic batch, and one that uses every field (LoRA
// names, session ids, ownership, bin hashes, extra_keys) in both forms.
func TestDecodeBatchNoAllocs(t *testing.T) {
	full := []Event{
		{Type: BlockStored, BlockHashes: []Hash{IntHash(1), IntHash(2)}, TokenIDs: make([]int64, 32), BlockSize: 16,
			LoraID: Some[int64](3), LoraName: Some("adapter-a"), Medium: Some("GPU"), HasExtraKeys: true,
			ExtraKeys: [][]byte{{0x91, 0xa1, 'x'}, nil}, GroupIdx: Some[int64](0), KVCacheSpecKind: Some("full_attention"),
			Locality: Some("LOCAL"), Ownership: Some("kv-tier"), SessionID: Some("session-17")},
		{Type: BlockStored, BlockHashes: []Hash{mustBytesHash(t, bytes.Repeat([]byte{9}, 32))}, Medium: Some("CPU")},
		{Type: BlockStored, BlockHashes: []Hash{IntHash(5)}, TokenIDs: make([]int64, 16), BlockSize: 16,
			LoraID: Some[int64](4), LoraName: Some("adapter-b"), SessionID: Some("session-18")},
		{Type: BlockRemoved, BlockHashes: []Hash{IntHash(1)}, Medium: Some("GPU"), Ownership: Some("kv-tier")},
		{Type: AllBlocksCleared},
	}
	real, n := realisticBatch(1)
	for _, c := range []struct {
		name   string
		p      []byte
		events int
	}{
		{"realistic", real, n},
		{"every-field-map", AppendBatch(nil, 2, full, Some[int64](1), true), len(full)},
		{"every-field-array", AppendBatch(nil, 2, full, Opt[int64]{}, false), len(full)},
	} {
		var b Batch
		decode := func() {
			if err := decodeBatch(c.p, limits{}, &b, nil); err != nil || len(b.Events) != c.events {
				t.Fatalf("%s: %v, %d events", c.name, err, len(b.Events))
			}
		}
		decode()
		if a := testing.AllocsPerRun(200, decode); a != 0 {
			t.Errorf("%s: %v allocations per batch once warm, want 0", c.name, a)
		}
	}
}

// TestLyingHeaders sends batches whose events, block hashes, token ids or
// extra_keys claim 2^32-1 elements over a few bytes: each is refused as a
// decode error before anything is allocated for what the header claims.
func TestLyingHeaders(t *testing.T) {
	huge := []byte{0xdd, 0xff, 0xff, 0xff, 0xff}
	event := func(field string) []byte {
		b := []byte{0x84, 0xa4, 't', 'y', 'p', 'e', 0xab}
		b = append(b, "BlockStored"...)
		for _, f := range []string{"block_hashes", "token_ids", "block_size"} {
			b = append(b, 0xa0|byte(len(f)))
			b = append(b, f...)
			switch {
			case f == field:
				b = append(b, huge...)
				b = append(b, 1, 2, 3)
			case f == "block_size":
				b = append(b, 16)
			default:
				b = append(b, 0x90)
			}
		}
		return b
	}
	batch := func(events ...[]byte) []byte {
		b := []byte{0x93, 0x01, 0x90 | byte(len(events))}
		for _, e := range events {
			b = append(b, e...)
		}
		return append(b, 0xc0)
	}
	cases := map[string][]byte{
		"events":       append(append([]byte{0x93, 0x01}, huge...), 0xc0),
		"block_hashes": batch(event("block_hashes")),
		"token_ids":    batch(event("token_ids")),
		"extra_keys":   batch(append(append(append([]byte{0x82, 0xa4, 't', 'y', 'p', 'e', 0xb0}, "AllBlocksCleared"...), 0xaa), append([]byte("extra_keys"), huge...)...)),
	}
	for name, p := range cases {
		var b Batch
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		err := decodeBatch(p, limits{}, &b, nil)
		runtime.ReadMemStats(&after)
		if decodeguard.ReasonOf(err) != decodeguard.ReasonDecode {
			t.Errorf("%s: %v, want a decode error", name, err)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
			t.Errorf("%s: %d bytes allocated for a refused batch", name, n)
		}
		checkDifferential(t, p, limits{})
	}
}

package kvevents

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/zmqguard/zmqguard/decodeguard"
)

// Vectors from vLLM's encoder (msgspec), see docs/kv-events.md.
const (
	vecClearedMap = "81a474797065b0416c6c426c6f636b73436c6561726564"
	vecRemovedMap = "84a474797065ac426c6f636b52656d6f766564ac626c6f636b5f68617368657391cf1122334455667788a66d656469756da3475055a967726f75705f69647800"
	vecStoredMap  = "88a474797065ab426c6f636b53746f726564ac626c6f636b5f68617368657391cf1122334455667788b1706172656e745f626c6f636b5f6861736807a9746f6b656e5f6964739109aa626c6f636b5f73697a6501a76c6f72615f6964c0a66d656469756da3475055a96c6f72615f6e616d65c0"
	vecBatch      = "93cb41d954fc402000009181a474797065b0416c6c426c6f636b73436c656172656400"
	vecRemovedArr = "93ac426c6f636b52656d6f76656491cf1122334455667788a3475055"
	// msgspec writes an array_like struct with every field: group_idx nil.
	vecRemovedArrFull = "94ac426c6f636b52656d6f76656491cf1122334455667788a3475055c0"
	vecClearedArr     = "91b0416c6c426c6f636b73436c6561726564"
	vecEndOfReplay    = "ffffffffffffffff"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func vecStored() Event {
	return Event{Type: BlockStored, BlockHashes: []Hash{IntHash(0x1122334455667788)},
		ParentBlockHash: Opt[Hash]{V: IntHash(7), Valid: true}, TokenIDs: []int64{9}, BlockSize: 1,
		Medium: Some("GPU")}
}

func vecRemoved() Event {
	return Event{Type: BlockRemoved, BlockHashes: []Hash{IntHash(0x1122334455667788)},
		Medium: Some("GPU"), GroupIdx: Some[int64](0)}
}

// batchOf wraps one encoded event into a batch payload.
func batchOf(t testing.TB, events ...string) []byte {
	t.Helper()
	b := []byte{0x93, 0xcb, 0x41, 0xd9, 0x54, 0xfc, 0x40, 0x20, 0, 0, byte(0x90 + len(events))}
	for _, e := range events {
		b = append(b, unhex(t, e)...)
	}
	return append(b, 0x00)
}

func TestEncodeVectors(t *testing.T) {
	cases := []struct {
		name    string
		ev      Event
		mapForm bool
		want    string
	}{
		{"cleared map", Event{Type: AllBlocksCleared}, true, vecClearedMap},
		{"removed map", vecRemoved(), true, vecRemovedMap},
		{"stored map", vecStored(), true, vecStoredMap},
		{"cleared array", Event{Type: AllBlocksCleared}, false, vecClearedArr},
		{"removed array", Event{Type: BlockRemoved, BlockHashes: []Hash{IntHash(0x1122334455667788)}, Medium: Some("GPU")}, false, vecRemovedArrFull},
	}
	for _, c := range cases {
		got := AppendBatch(nil, 1700000000.5, []Event{c.ev}, Some[int64](0), c.mapForm)
		want := batchOf(t, c.want)
		if !bytes.Equal(got, want) {
			t.Errorf("%s:\n got %x\nwant %x", c.name, got, want)
		}
	}
	if got := hex.EncodeToString(AppendBatch(nil, 1700000000.5, []Event{{Type: AllBlocksCleared}}, Some[int64](0), true)); got != vecBatch {
		t.Errorf("batch: got %s want %s", got, vecBatch)
	}
}

func TestDecodeVectors(t *testing.T) {
	p := batchOf(t, vecStoredMap, vecRemovedMap, vecClearedMap, vecRemovedArr, vecClearedArr)
	var b Batch
	if err := decodeBatch(p, limits{}, &b, nil); err != nil {
		t.Fatal(err)
	}
	if b.TS != 1700000000.5 || !b.DataParallelRank.Valid || b.DataParallelRank.V != 0 || len(b.Events) != 5 {
		t.Fatalf("batch %+v", b)
	}
	s := b.Events[0]
	if s.Type != BlockStored || len(s.BlockHashes) != 1 || s.BlockHashes[0].Uint64() != 0x1122334455667788 ||
		!s.ParentBlockHash.Valid || s.ParentBlockHash.V.Uint64() != 7 || len(s.TokenIDs) != 1 || s.TokenIDs[0] != 9 ||
		s.BlockSize != 1 || s.LoraID.Valid || s.Medium != Some("GPU") || s.LoraName.Valid || s.HasExtraKeys {
		t.Errorf("stored %+v", s)
	}
	r := b.Events[1]
	if r.Type != BlockRemoved || r.Medium != Some("GPU") || r.GroupIdx != Some[int64](0) || r.BlockHashes[0].Uint64() != 0x1122334455667788 {
		t.Errorf("removed %+v", r)
	}
	if b.Events[2].Type != AllBlocksCleared || b.Events[3].Type != BlockRemoved || b.Events[3].GroupIdx.Valid || b.Events[4].Type != AllBlocksCleared {
		t.Errorf("events %+v", b.Events[2:])
	}
	for i, want := range []int{0, 1, 2, 3, 4} {
		if b.Index[i] != want {
			t.Errorf("index %v", b.Index)
		}
	}
}

func TestRoundTripBothForms(t *testing.T) {
	digest := bytes.Repeat([]byte{0xab}, 32)
	digest[31] = 0x01
	bh, _ := BytesHash(digest)
	extra := AppendBatch(nil, 0, nil, Opt[int64]{}, true)[:0]
	extra = append(extra, 0x92, 0xa1, 'x', 0x05) // ("x", 5)
	full := Event{Type: BlockStored, BlockHashes: []Hash{bh, IntHash(1 << 63)}, TokenIDs: []int64{1, 2, 3, 4},
		BlockSize: 2, LoraID: Some[int64](3), Medium: Some("CPU"), LoraName: Some("l"), HasExtraKeys: true,
		ExtraKeys: [][]byte{extra, nil}, GroupIdx: Some[int64](1), KVCacheSpecKind: Some("full_attention"),
		KVCacheSpecSlidingWindow: Some[int64](-1), Locality: Some("local"), Ownership: Some("own"), SessionID: Some("s")}
	for _, mapForm := range []bool{true, false} {
		p := AppendBatch(nil, 12.25, []Event{full, {Type: AllBlocksCleared}}, Opt[int64]{}, mapForm)
		var b Batch
		if err := decodeBatch(p, limits{}, &b, nil); err != nil {
			t.Fatalf("mapForm=%v: %v", mapForm, err)
		}
		if b.DataParallelRank.Valid || len(b.Events) != 2 {
			t.Fatalf("batch %+v", b)
		}
		e := b.Events[0]
		later := Some("local") == e.Locality && Some("own") == e.Ownership && Some("s") == e.SessionID
		if mapForm != later {
			// The array form (v0.25 and before) has no field after
			// kv_cache_spec_sliding_window.
			t.Errorf("mapForm=%v: locality/ownership/session_id %v %v %v", mapForm, e.Locality, e.Ownership, e.SessionID)
		}
		if !e.BlockHashes[0].isBytes() || e.BlockHashes[0].String() != hex.EncodeToString(digest) ||
			e.BlockHashes[0].Uint64() != 0xabababababababab&^0xff|0x01 || e.BlockHashes[1].Uint64() != 1<<63 ||
			e.LoraID != Some[int64](3) || e.Medium != Some("CPU") || e.LoraName != Some("l") || !e.HasExtraKeys ||
			len(e.ExtraKeys) != 2 || !bytes.Equal(e.ExtraKeys[0], extra) || !bytes.Equal(e.ExtraKeys[1], []byte{0xc0}) ||
			e.GroupIdx != Some[int64](1) || e.KVCacheSpecKind != Some("full_attention") || e.KVCacheSpecSlidingWindow != Some[int64](-1) {
			t.Errorf("mapForm=%v: %+v", mapForm, e)
		}
	}
}

func TestDecodeDrops(t *testing.T) {
	good := vecClearedMap
	bad := map[string]struct {
		ev     Event
		raw    string
		reason decodeguard.Reason
	}{
		"block_size 0 with tokens": {ev: Event{Type: BlockStored, BlockHashes: []Hash{IntHash(1)}, BlockSize: 0, TokenIDs: []int64{1}}, reason: decodeguard.ReasonValidate},
		"placeholder no hash":      {ev: Event{Type: BlockStored, BlockSize: 0}, reason: decodeguard.ReasonValidate},
		"tokens not a multiple":    {ev: Event{Type: BlockStored, BlockHashes: []Hash{IntHash(1)}, BlockSize: 2, TokenIDs: []int64{1, 2, 3}}, reason: decodeguard.ReasonValidate},
		"tokens fewer than hashes": {ev: Event{Type: BlockStored, BlockHashes: []Hash{IntHash(1), IntHash(2)}, BlockSize: 2, TokenIDs: []int64{1, 2}}, reason: decodeguard.ReasonValidate},
		"block_size -1":            {ev: Event{Type: BlockStored, BlockHashes: []Hash{IntHash(1)}, BlockSize: -1}, reason: decodeguard.ReasonValidate},
		"tokens mismatch":          {ev: Event{Type: BlockStored, BlockHashes: []Hash{IntHash(1)}, BlockSize: 2, TokenIDs: []int64{1}}, reason: decodeguard.ReasonValidate},
		"tokens huge size":         {ev: Event{Type: BlockStored, BlockHashes: []Hash{IntHash(1)}, BlockSize: 1 << 62, TokenIDs: []int64{1}}, reason: decodeguard.ReasonValidate},
		"extra_keys len":           {ev: Event{Type: BlockStored, BlockHashes: []Hash{IntHash(1), IntHash(2)}, BlockSize: 1, HasExtraKeys: true, ExtraKeys: [][]byte{nil}}, reason: decodeguard.ReasonValidate},
		"unknown tag":              {raw: "81a474797065a3466f6f", reason: decodeguard.ReasonUnsupported},
		"unknown tag late":         {raw: "82ac626c6f636b5f68617368657301a474797065a3466f6f", reason: decodeguard.ReasonUnsupported},
		"unknown array":            {raw: "92a3466f6f01", reason: decodeguard.ReasonUnsupported},
		"no type":                  {raw: "81a16101", reason: decodeguard.ReasonDecode},
		"hash is str":              {raw: "83a474797065ac426c6f636b52656d6f766564ac626c6f636b5f686173686573" + "91a178" + "", reason: decodeguard.ReasonDecode},
		"bare int":                 {raw: "07", reason: decodeguard.ReasonDecode},
		"tag is int":               {raw: "9107", reason: decodeguard.ReasonDecode},
	}
	for name, c := range bad {
		raw := c.raw
		if raw == "" {
			raw = hex.EncodeToString(appendEventMap(nil, &c.ev))
		} else if name == "hash is str" {
			raw = "82a474797065ac426c6f636b52656d6f766564ac626c6f636b5f686173686573" + "91a178"
		}
		p := batchOf(t, good, raw, good)
		var b Batch
		var drops []eventDrop
		if err := decodeBatch(p, limits{}, &b, func(d eventDrop) { drops = append(drops, d) }); err != nil {
			t.Errorf("%s: batch error %v", name, err)
			continue
		}
		if len(b.Events) != 2 || b.DroppedEvents != 1 || len(drops) != 1 || drops[0].Index != 1 || b.Index[1] != 2 {
			t.Errorf("%s: events %d dropped %d drops %+v", name, len(b.Events), b.DroppedEvents, drops)
			continue
		}
		if r := decodeguard.ReasonOf(drops[0].Err); r != c.reason {
			t.Errorf("%s: reason %v want %v (%v)", name, r, c.reason, drops[0].Err)
		}
		if wantTag := c.reason == decodeguard.ReasonUnsupported; wantTag != (drops[0].Type == "Foo") {
			t.Errorf("%s: drop type %q", name, drops[0].Type)
		}
	}
	// Shapes vLLM sends, accepted and flagged.
	ok := map[string]struct {
		ev          Event
		placeholder bool
		skipped     int
	}{
		// Offloading placeholders: block_size 0, no tokens (vLLM PR
		// #36644); before it, the block size with no tokens.
		"placeholder":     {Event{Type: BlockStored, BlockHashes: []Hash{IntHash(1)}, Medium: Some("CPU")}, true, 0},
		"offload no toks": {Event{Type: BlockStored, BlockHashes: []Hash{IntHash(1), IntHash(2)}, BlockSize: 256, Medium: Some("CPU")}, true, 0},
		// Null blocks keep their tokens, lose their hash (#44451).
		"hybrid align": {Event{Type: BlockStored, BlockHashes: []Hash{IntHash(1)}, BlockSize: 2, TokenIDs: []int64{1, 2, 3, 4, 5, 6}}, false, 2},
		"all null":     {Event{Type: BlockStored, BlockSize: 2, TokenIDs: []int64{1, 2}}, false, 1},
		"full blocks":  {Event{Type: BlockStored, BlockHashes: []Hash{IntHash(1)}, BlockSize: 2, TokenIDs: []int64{1, 2}}, false, 0},
		"removed":      {Event{Type: BlockRemoved, BlockHashes: []Hash{IntHash(1)}}, false, 0},
		"all cleared":  {Event{Type: AllBlocksCleared}, false, 0},
	}
	// token_ids nil (vLLM's MooncakeStoreConnector without tokens) reads as
	// no tokens.
	nilTokens := appendEventMap(nil, &Event{Type: BlockStored, BlockHashes: []Hash{IntHash(1)}, BlockSize: 16, TokenIDs: []int64{}})
	nilTokens = bytes.Replace(nilTokens, []byte("\xa9token_ids\x90"), []byte("\xa9token_ids\xc0"), 1)
	if !bytes.Contains(nilTokens, []byte("\xa9token_ids\xc0")) {
		t.Fatalf("no nil token_ids in %x", nilTokens)
	}
	var nb Batch
	if err := decodeBatch(batchOf(t, hex.EncodeToString(nilTokens)), limits{}, &nb, nil); err != nil || len(nb.Events) != 1 || !nb.Events[0].placeholder() {
		t.Errorf("token_ids nil: %v %+v", err, nb)
	}
	for name, c := range ok {
		var b Batch
		if err := decodeBatch(AppendBatch(nil, 1, []Event{c.ev}, Opt[int64]{}, true), limits{}, &b, nil); err != nil || len(b.Events) != 1 {
			t.Errorf("%s: %v %+v", name, err, b)
			continue
		}
		if e := &b.Events[0]; e.placeholder() != c.placeholder || e.SkippedBlocks() != c.skipped {
			t.Errorf("%s: Placeholder %v SkippedBlocks %d, want %v %d", name, e.placeholder(), e.SkippedBlocks(), c.placeholder, c.skipped)
		}
	}
}

func TestDecodeBatchErrors(t *testing.T) {
	cases := map[string]struct {
		p      []byte
		lim    limits
		reason decodeguard.Reason
	}{
		"empty":       {p: nil, reason: decodeguard.ReasonDecode},
		"bare int":    {p: []byte{0x07}, reason: decodeguard.ReasonDecode},
		"short":       {p: []byte{0x91, 0x01}, reason: decodeguard.ReasonDecode},
		"ts str":      {p: []byte{0x92, 0xa1, 'x', 0x90}, reason: decodeguard.ReasonDecode},
		"events int":  {p: []byte{0x92, 0x01, 0x01}, reason: decodeguard.ReasonDecode},
		"rank str":    {p: []byte{0x93, 0x01, 0x90, 0xa1, 'x'}, reason: decodeguard.ReasonDecode},
		"huge array":  {p: []byte{0xdd, 0xff, 0xff, 0xff, 0xff}, reason: decodeguard.ReasonDecode},
		"truncated":   {p: unhex(t, vecBatch)[:20], reason: decodeguard.ReasonDecode},
		"oversize":    {p: batchOf(t, vecClearedMap), lim: limits{MaxPayload: 10}, reason: decodeguard.ReasonOversize},
		"many events": {p: batchOf(t, vecClearedMap, vecClearedMap), lim: limits{MaxEvents: 1}, reason: decodeguard.ReasonOversize},
		"bad utf8":    {p: []byte{0x92, 0x01, 0x91, 0x81, 0xa4, 't', 'y', 'p', 'e', 0xa3, 0xe0, 0x80, 0x80}, reason: decodeguard.ReasonDecode},
	}
	for name, c := range cases {
		var b Batch
		err := decodeBatch(c.p, c.lim, &b, nil)
		if !decodeguard.IsBadInput(err) || decodeguard.ReasonOf(err) != c.reason {
			t.Errorf("%s: %v (reason %v, want %v)", name, err, decodeguard.ReasonOf(err), c.reason)
		}
		var de *decodeguard.Error
		if !errors.As(err, &de) {
			t.Errorf("%s: not a *decodeguard.Error", name)
		}
	}
	// The map form of the batch itself is accepted too.
	p := []byte{0x83, 0xa2, 't', 's', 0x01, 0xa6, 'e', 'v', 'e', 'n', 't', 's', 0x91}
	p = append(p, unhex(t, vecClearedArr)...)
	p = append(p, 0xb2)
	p = append(p, "data_parallel_rank"...)
	p = append(p, 0x03)
	var b Batch
	if err := decodeBatch(p, limits{}, &b, nil); err != nil || b.TS != 1 || b.DataParallelRank != Some[int64](3) || len(b.Events) != 1 {
		t.Errorf("map batch: %v %+v", err, b)
	}
}

func TestHashFold(t *testing.T) {
	d := make([]byte, 32)
	for i := range d {
		d[i] = byte(i)
	}
	h, ok := BytesHash(d)
	if !ok || h.Uint64() != 0x18191a1b1c1d1e1f || !h.isBytes() || !bytes.Equal(h.Bytes(), d) {
		t.Fatalf("fold %x", h.Uint64())
	}
	if h, _ := BytesHash([]byte{1, 2}); h.Uint64() != 0x0102 {
		t.Fatalf("short fold %x", h.Uint64())
	}
	if _, ok := BytesHash(make([]byte, 33)); ok {
		t.Fatal("33-byte hash accepted")
	}
	if IntHash(5).String() != "5" || IntHash(5).Bytes() != nil {
		t.Fatal("int hash")
	}
}

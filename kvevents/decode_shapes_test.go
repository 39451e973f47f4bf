package kvevents

import (
	"math"
	"runtime"
	"testing"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
)

// rareShapes are payloads in the encodings the one-pass decoder used to
// leave to the checked decoder (issue 41): valid rare encodings, repeated
// keys, and every event- and batch-level refusal. Each is checked against
// the oracle, and seeds FuzzDecodeMatchesOracle.
func rareShapes() map[string][]byte {
	str := msgp.AppendString
	stored := func(extra func([]byte) []byte) []byte {
		b := msgp.AppendMapHeader(nil, 4)
		b = str(b, "type")
		b = str(b, "BlockStored")
		b = str(b, "block_hashes")
		b = msgp.AppendArrayHeader(b, 1)
		b = msgp.AppendUint64(b, 7)
		b = str(b, "token_ids")
		b = msgp.AppendArrayHeader(b, 2)
		b = msgp.AppendInt64(b, 1)
		b = msgp.AppendInt64(b, 2)
		b = str(b, "block_size")
		b = msgp.AppendInt64(b, 2)
		if extra != nil {
			b[0]++
			b = extra(b)
		}
		return b
	}
	// field builds a map event of type typ with one more field.
	field := func(typ, name string, val func([]byte) []byte) []byte {
		b := msgp.AppendMapHeader(nil, 2)
		b = str(b, name)
		b = val(b)
		b = str(b, "type")
		return str(b, typ)
	}
	arrBatch := func(ts func([]byte) []byte, rank func([]byte) []byte, events ...[]byte) []byte {
		n := uint32(2)
		if rank != nil {
			n = 3
		}
		b := msgp.AppendArrayHeader(nil, n)
		b = ts(b)
		b = msgp.AppendArrayHeader(b, uint32(len(events)))
		for _, e := range events {
			b = append(b, e...)
		}
		if rank != nil {
			b = rank(b)
		}
		return b
	}
	f64 := func(b []byte) []byte { return msgp.AppendFloat64(b, 1.5) }
	batch := func(events ...[]byte) []byte { return arrBatch(f64, nil, events...) }
	mapBatch := func(kv ...func([]byte) []byte) []byte {
		b := msgp.AppendMapHeader(nil, uint32(len(kv)/2))
		for _, f := range kv {
			b = f(b)
		}
		return b
	}
	k := func(s string) func([]byte) []byte { return func(b []byte) []byte { return str(b, s) } }
	bink := func(s string) func([]byte) []byte {
		return func(b []byte) []byte { return msgp.AppendBytes(b, []byte(s)) }
	}
	events := func(evs ...[]byte) func([]byte) []byte {
		return func(b []byte) []byte {
			b = msgp.AppendArrayHeader(b, uint32(len(evs)))
			for _, e := range evs {
				b = append(b, e...)
			}
			return b
		}
	}
	raw := func(x ...byte) func([]byte) []byte { return func(b []byte) []byte { return append(b, x...) } }
	good := stored(nil)
	later := stored(func(b []byte) []byte { return raw(0x91, 0x91, 0x91, 0x90)(str(b, "later")) })
	bad := field("BlockRemoved", "block_hashes", k("nope"))
	pairs := func(vals ...[]int64) func([]byte) []byte {
		return func(b []byte) []byte {
			b = msgp.AppendArrayHeader(b, uint32(len(vals)))
			for _, v := range vals {
				b = msgp.AppendArrayHeader(b, uint32(len(v)))
				for _, x := range v {
					b = msgp.AppendInt64(b, x)
				}
			}
			return b
		}
	}
	sglangStore := func(tokens func([]byte) []byte) []byte {
		b := msgp.AppendArrayHeader(nil, 7)
		b = str(b, "BlockStored")
		b = msgp.AppendArrayHeader(b, 1)
		b = msgp.AppendInt64(b, -5)
		b = msgp.AppendNil(b)
		b = tokens(b)
		b = msgp.AppendInt64(b, 1)
		b = msgp.AppendNil(b)
		return msgp.AppendNil(b)
	}
	return map[string][]byte{
		"float32 ts":          arrBatch(func(b []byte) []byte { return msgp.AppendFloat32(b, 2.5) }, nil, good),
		"negative ts":         arrBatch(func(b []byte) []byte { return msgp.AppendInt64(b, -3) }, nil, good),
		"uint64 ts":           arrBatch(func(b []byte) []byte { return msgp.AppendUint64(b, math.MaxUint64) }, nil, good),
		"str ts":              arrBatch(k("x"), nil, good),
		"signed rank":         arrBatch(f64, func(b []byte) []byte { return msgp.AppendInt64(b, -1) }, good),
		"huge rank":           arrBatch(f64, func(b []byte) []byte { return msgp.AppendUint64(b, math.MaxUint64) }, good, bad),
		"str rank with drops": arrBatch(f64, k("r"), bad, good, bad),
		"extra elements":      append(append(append(f64(msgp.AppendArrayHeader(nil, 5)), events(good)(nil)...), 0xc0, 0x91, 0x01), 0x80),
		"one element":         msgp.AppendFloat64(msgp.AppendArrayHeader(nil, 1), 1),
		"events not array":    append(f64(msgp.AppendArrayHeader(nil, 2)), 0x05),
		"top-level str":       str(nil, "batch"),
		"bin keys":            mapBatch(bink("ts"), f64, bink("events"), events(good), bink("other"), raw(0x01)),
		"int batch key":       mapBatch(k("ts"), f64, raw(0x05), raw(0x01), k("events"), events(good)),
		"repeated events":     mapBatch(k("events"), k("not yet"), k("ts"), f64, k("events"), events(bad, good)),
		"events replaced":     mapBatch(k("events"), events(bad, later, bad), k("ts"), f64, k("events"), events(good)),
		"last events bad":     mapBatch(k("events"), events(bad, good), k("ts"), f64, k("events"), raw(0x05)),
		"bad ts after events": mapBatch(k("events"), events(bad, good), k("ts"), k("x")),
		"repeated ts":         mapBatch(k("ts"), k("x"), k("ts"), f64, k("events"), events(good)),
		"bad rank in map":     mapBatch(k("events"), events(bad), k("ts"), f64, k("data_parallel_rank"), raw(0xc3)),
		"no ts":               mapBatch(k("events"), events(good)),
		"repeated fields": batch(stored(func(b []byte) []byte {
			b = str(b, "block_hashes")
			b = msgp.AppendArrayHeader(b, 2)
			b = msgp.AppendInt64(b, 3)
			return msgp.AppendInt64(b, 4)
		})),
		"repeated type":    batch(stored(func(b []byte) []byte { return str(str(b, "type"), "BlockRemoved") })),
		"bin type key":     batch(mapBatch(bink("type"), k("AllBlocksCleared"))),
		"int event key":    batch(mapBatch(k("type"), k("AllBlocksCleared"), raw(0x01), raw(0x02))),
		"int type":         batch(mapBatch(k("type"), raw(0x01))),
		"int tag":          batch(msgp.AppendInt64(msgp.AppendArrayHeader(nil, 1), 3)),
		"empty event":      batch(msgp.AppendArrayHeader(nil, 0)),
		"str event":        batch(str(nil, "BlockStored")),
		"no type":          batch(mapBatch(k("medium"), k("GPU"))),
		"unknown tag":      batch(msgp.AppendString(msgp.AppendArrayHeader(nil, 1), "BlockMoved"), good),
		"inactive":         batch(field("BlockInactive", "block_hashes", events())),
		"field then tag":   batch(mapBatch(k("medium"), raw(0x01), k("x"), raw(0x02), k("type"), k("BlockMoved"))),
		"field known tag":  batch(mapBatch(k("medium"), raw(0x01), k("type"), k("BlockRemoved"))),
		"field bad key":    batch(mapBatch(k("medium"), raw(0x01), raw(0x07), raw(0x02), k("type"), k("BlockMoved"))),
		"field int type":   batch(mapBatch(k("medium"), raw(0x01), k("type"), raw(0x02), k("type"), k("BlockMoved"))),
		"signed hashes":    batch(field("BlockRemoved", "block_hashes", raw(0x93, 0xd0, 0x05, 0xff, 0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0))),
		"bin16 hash":       batch(field("BlockRemoved", "block_hashes", raw(0x91, 0xc5, 0, 2, 9, 9))),
		"empty bin hash":   batch(field("BlockRemoved", "block_hashes", raw(0x91, 0xc4, 0))),
		"long bin hash":    batch(field("BlockRemoved", "block_hashes", raw(append([]byte{0x91, 0xc4, 33}, make([]byte, 33)...)...))),
		"str hash":         batch(field("BlockRemoved", "block_hashes", raw(0x91, 0xa1, 'h'))),
		"hashes not array": batch(field("BlockRemoved", "block_hashes", raw(0x01))),
		"parent str":       batch(stored(func(b []byte) []byte { return str(str(b, "parent_block_hash"), "p") })),
		"signed tokens":    batch(stored(func(b []byte) []byte { return raw(0x92, 0xff, 0xd1, 0, 3)(str(b, "token_ids")) })),
		"huge token": batch(stored(func(b []byte) []byte {
			return msgp.AppendUint64(msgp.AppendArrayHeader(str(b, "token_ids"), 1), math.MaxUint64)
		})),
		"str token":        batch(stored(func(b []byte) []byte { return raw(0x93, 1, 2, 0xa0)(str(b, "token_ids")) })),
		"tokens not array": batch(stored(func(b []byte) []byte { return raw(0x05)(str(b, "token_ids")) })),
		"token pairs":      batch(sglangStore(pairs([]int64{1, 2}, []int64{2, 3}))),
		"short pair":       batch(sglangStore(pairs([]int64{1, 2}, []int64{2}))),
		"negative pair":    batch(sglangStore(pairs([]int64{1, -2}))),
		"str in pair":      batch(sglangStore(raw(0x91, 0x92, 0x01, 0xa0))),
		"nil tokens":       batch(sglangStore(raw(0xc0))),
		"extra str entry":  batch(stored(func(b []byte) []byte { return raw(0x91, 0xa1, 'e')(str(b, "extra_keys")) })),
		"extra not array":  batch(stored(func(b []byte) []byte { return raw(0x01)(str(b, "extra_keys")) })),
		"nil block_size":   batch(field("BlockStored", "block_size", raw(0xc0))),
		"str lora_id":      batch(stored(func(b []byte) []byte { return raw(0xa1, 'l')(str(b, "lora_id")) })),
		"int medium":       batch(stored(func(b []byte) []byte { return raw(0x01)(str(b, "medium")) })),
		"bin lora_name":    batch(stored(func(b []byte) []byte { return raw(0xc4, 1, 'l')(str(b, "lora_name")) })),
		"lora name":        batch(stored(func(b []byte) []byte { return str(str(b, "lora_name"), "adapter-é") })),
		"bad utf-8 key":    batch(stored(func(b []byte) []byte { return raw(0x01)(raw(0xa1, 0xff)(b)) })),
		"deep unknown":     batch(stored(func(b []byte) []byte { return raw(0x91, 0x91, 0x91, 0x90)(str(b, "later")) })),
		"validation":       batch(stored(func(b []byte) []byte { return msgp.AppendInt64(str(b, "block_size"), 3) })),
	}
}

// TestDecodeRareShapes decodes each rare shape with both decoders and
// requires the same result, and checks a few of the results outright.
func TestDecodeRareShapes(t *testing.T) {
	shapes := rareShapes()
	for _, p := range shapes {
		for _, lim := range []limits{{}, {SGLang: true, Inactive: true}, {MaxEvents: 1}} {
			checkDifferential(t, p, lim)
		}
	}
	var b Batch
	var drops []eventDrop
	onDrop := func(d eventDrop) { drops = append(drops, d) }
	if err := decodeBatch(shapes["float32 ts"], limits{}, &b, onDrop); err != nil || b.TS != 2.5 || len(b.Events) != 1 {
		t.Errorf("float32 ts: %v %v %d events", err, b.TS, len(b.Events))
	}
	if err := decodeBatch(shapes["events replaced"], limits{}, &b, onDrop); err != nil || len(b.Events) != 1 || b.DroppedEvents != 0 ||
		len(drops) != 0 || b.UnknownFields != 0 {
		t.Errorf("events replaced: %v, %d events, %d dropped, drops %v, %d unknown", err, len(b.Events), b.DroppedEvents, drops, b.UnknownFields)
	}
	err := decodeBatch(shapes["str rank with drops"], limits{}, &b, onDrop)
	if decodeguard.ReasonOf(err) != decodeguard.ReasonDecode || len(drops) != 2 {
		t.Errorf("str rank with drops: %v, drops %v (want the refusal after 2 drops)", err, drops)
	}
	drops = nil
	err = decodeBatch(shapes["bad ts after events"], limits{}, &b, onDrop)
	if decodeguard.ReasonOf(err) != decodeguard.ReasonDecode || len(drops) != 0 {
		t.Errorf("bad ts after events: %v, drops %v (want the refusal alone)", err, drops)
	}
	if err := decodeBatch(shapes["token pairs"], limits{SGLang: true}, &b, nil); err != nil || len(b.Events) != 1 || !b.Events[0].TokenPairs {
		t.Errorf("token pairs: %v %+v", err, b.Events)
	}
	if err := decodeBatch(shapes["field then tag"], limits{}, &b, onDrop); err != nil || len(drops) != 1 || drops[0].Type != "BlockMoved" ||
		decodeguard.ReasonOf(drops[0].Err) != decodeguard.ReasonUnsupported {
		t.Errorf("field then tag: %v %v", err, drops)
	}
}

// TestLyingPairsHeader sends token_ids whose array header claims as many
// [t_i, t_i+1] pairs as there are bytes left in a 1 MiB payload: the
// decoder allocates for at most the pairs those bytes can hold (3 bytes
// each), not 16 bytes of ids for every byte left.
func TestLyingPairsHeader(t *testing.T) {
	const pad = 1 << 20
	b := msgp.AppendArrayHeader(nil, 2)
	b = msgp.AppendFloat64(b, 1)
	b = msgp.AppendArrayHeader(b, 1)
	b = msgp.AppendMapHeader(b, 3)
	b = msgp.AppendString(b, "type")
	b = msgp.AppendString(b, "BlockStored")
	b = msgp.AppendString(b, "token_ids")
	b = msgp.AppendArrayHeader(b, pad)
	b = append(b, 0x92, 0x01, 0x02)
	b = msgp.AppendString(b, "later")
	b = msgp.AppendString(b, string(make([]byte, pad)))
	var bt Batch
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := decodeBatch(b, limits{}, &bt, nil)
	runtime.ReadMemStats(&after)
	if decodeguard.ReasonOf(err) != decodeguard.ReasonDecode {
		t.Errorf("%v, want a decode error", err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 8*pad {
		t.Errorf("%d bytes allocated for a %d-byte payload", n, len(b))
	}
	checkDifferential(t, b, limits{})
}

package kvindex_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/zmqguard/zmqguard/internal/ref/kvmodel"
	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
)

// fuzzEvents turns bytes into batches of events for 3 engines, five bytes
// an event: what (store, tier-only store, removal, clear, reset, lost,
// end of batch) and engine; hashes; a block-size choice (including 0,
// negative, huge and token counts that do not match); medium (including
// empty and over-long) and group (including out of range); parent and
// LoRA.
func fuzzEvents(data []byte, apply func(engine string, evs []kvevents.Event), control func(engine string, reset bool)) {
	engines := []string{"a", "b", "c"}
	media := []string{"GPU", "CPU", "", strings.Repeat("m", kvindex.MaxMediumLen+1), "disk"}
	var batch []kvevents.Event
	batchEngine := ""
	flush := func() {
		if len(batch) > 0 {
			apply(batchEngine, batch)
		}
		batch = nil
	}
	for len(data) >= 5 {
		b := data[:5]
		data = data[5:]
		e := engines[int(b[0]>>4)%3]
		if e != batchEngine {
			flush()
			batchEngine = e
		}
		h := uint64(b[1] % 32)
		n := int(b[2]%4) + 1
		bs := []int64{4, 4, 4, 0, -4, 8, 1 << 20, 4}[b[2]>>5]
		med := media[int(b[3]%8)%len(media)]
		group := []int64{0, 1, 0, 1, 0, kvindex.MaxGroup + 1, -1, 0}[b[3]>>5]
		switch b[0] % 8 {
		case 0, 1, 2: // store n blocks of a 4-token alphabet, chained
			toks := make([]int64, 0, n*4)
			for i := 0; i < n*4; i++ {
				toks = append(toks, int64((h+uint64(i))%5))
			}
			if b[4]&8 != 0 && len(toks) > 0 {
				toks = toks[:len(toks)-1] // not whole blocks
			}
			hs := make([]uint64, n)
			for i := range hs {
				hs[i] = h + uint64(i)
			}
			ev := kvmodel.Store(hs, -1, toks, 4, med, 0)
			ev.BlockSize, ev.GroupIdx = bs, kvevents.Some[int64](group)
			if b[4]&1 != 0 {
				ev.ParentBlockHash = kvevents.Opt[kvevents.Hash]{V: kvevents.IntHash(uint64(b[4] >> 3 % 32)), Valid: true}
			}
			if b[4]&2 != 0 {
				ev.LoraName = kvevents.Some("L")
				ev.HasExtraKeys, ev.ExtraKeys = true, kvindex.LoraExtraKeys("L", n)
			}
			if b[4]&4 != 0 {
				ev.Medium = kvevents.Opt[string]{}
			}
			batch = append(batch, ev)
		case 3:
			ev := kvmodel.Placeholder([]uint64{h}, med, 0)
			ev.GroupIdx = kvevents.Some[int64](group)
			batch = append(batch, ev)
		case 4:
			ev := kvmodel.Remove([]uint64{h, h + 1}[:n%2+1], med, 0)
			ev.GroupIdx = kvevents.Some[int64](group)
			batch = append(batch, ev)
		case 5:
			batch = append(batch, kvmodel.Cleared())
		case 6:
			flush()
			control(e, b[4]&1 == 0)
		case 7:
			flush()
		}
	}
	flush()
}

// FuzzApplyEvents feeds arbitrary event streams (hostile shapes included)
// to an index and to the reference Model: the index never panics, never
// fails, and scores every prompt of the alphabet exactly as the Model.
func FuzzApplyEvents(f *testing.F) {
	f.Add([]byte("\x00\x01\x02\x00\x00\x10\x01\x02\x00\x01\x03\x01\x00\x01\x00"))
	f.Add([]byte("\x00\x00\x03\x00\x00\x06\x00\x00\x00\x00\x00\x04\x03\x00\x00\x01\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4000 {
			return
		}
		x, err := kvindex.New(kvindex.Config{Capacity: 1 << 12})
		if err != nil {
			t.Fatal(err)
		}
		defer x.Close()
		m := kvmodel.NewModel(0, nil)
		fuzzEvents(data, func(engine string, evs []kvevents.Event) {
			if err := x.ApplyEvents(engine, evs); err != nil {
				t.Fatalf("ApplyEvents: %v", err)
			}
			m.ApplyEvents(engine, evs)
		}, func(engine string, reset bool) {
			if reset {
				x.Apply(kvevents.Update{Kind: kvevents.UpdateReset, Source: engine})
				m.Clear(engine)
			} else {
				x.Apply(kvevents.Update{Kind: kvevents.UpdateLost, Source: engine})
				m.Lost(engine)
			}
		})
		if st := x.Stats(); st.Backend.Entries != int64(m.Entries()) {
			t.Fatalf("index %d entries, model %d", st.Backend.Entries, m.Entries())
		}
		for start := uint64(0); start < 32; start++ {
			toks := make([]int64, 16)
			for i := range toks {
				toks[i] = int64((start + uint64(i)) % 5)
			}
			for _, lora := range []string{"", "L"} {
				req := kvindex.ScoreRequest{Tokens: toks, LoraName: lora}
				if lora != "" {
					req.ExtraKeys = kvindex.LoraExtraKeys(lora, 4)
				}
				got, err := x.Score(req)
				if err != nil {
					t.Fatal(err)
				}
				if want := m.Score(req, kvindex.DefaultBlockSize); !reflect.DeepEqual(got.Engines, want.Engines) {
					t.Fatalf("start %d lora %q:\nindex %+v\nmodel %+v", start, lora, got.Engines, want.Engines)
				}
			}
		}
	})
}

// FuzzEngineKeys applies the same hostile batches to an index in
// engine-key mode (Config.Keys: a block's key is its engine's hash): it
// never panics and never fails, its entries stay within the capacity, and
// every Score is well-formed (certain ≤ maybe ≤ the prompt's blocks, each
// tier within the engine's any-medium prefix).
func FuzzEngineKeys(f *testing.F) {
	f.Add([]byte("\x00\x01\x02\x00\x00\x10\x01\x02\x00\x01\x03\x01\x00\x01\x00"))
	f.Add([]byte("\x00\x00\x03\x00\x00\x06\x00\x00\x00\x00\x00\x04\x03\x00\x00\x01\x00\x00\x00\x00"))
	// Keys of a prompt: block i of a prompt starting with token s is key
	// s+i, the hashes fuzzEvents stores chains under.
	keys := func(req *kvindex.ScoreRequest, bs int, dst []kvindex.Key) ([]kvindex.Key, error) {
		for i := 0; i < len(req.Tokens)/bs; i++ {
			dst = append(dst, kvindex.Key(uint64(req.Tokens[0])+uint64(i)))
		}
		return dst, nil
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4000 {
			return
		}
		const capacity = 64
		x, err := kvindex.New(kvindex.Config{Capacity: capacity, Keys: keys, BlockSize: 4})
		if err != nil {
			t.Fatal(err)
		}
		defer x.Close()
		fuzzEvents(data, func(engine string, evs []kvevents.Event) {
			if err := x.ApplyEvents(engine, evs); err != nil {
				t.Fatalf("ApplyEvents: %v", err)
			}
		}, func(engine string, reset bool) {
			kind := kvevents.UpdateLost
			if reset {
				kind = kvevents.UpdateReset
			}
			if err := x.Apply(kvevents.Update{Kind: kind, Source: engine}); err != nil {
				t.Fatalf("Apply: %v", err)
			}
		})
		if st := x.Stats(); st.Backend.Entries > capacity {
			t.Fatalf("%d entries, capacity %d", st.Backend.Entries, capacity)
		}
		for start := int64(0); start < 32; start++ {
			toks := make([]int64, 16)
			toks[0] = start
			r, err := x.Score(kvindex.ScoreRequest{Tokens: toks, BlockSize: 4})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range r.Engines {
				if e.Blocks > e.MaybeBlocks || e.MaybeBlocks > r.PromptBlocks || e.MaybeBlocks == 0 {
					t.Fatalf("start %d: %+v of %d blocks", start, e, r.PromptBlocks)
				}
				for _, tr := range e.Tiers {
					if tr.Blocks > e.Blocks || tr.MaybeBlocks > e.MaybeBlocks {
						t.Fatalf("start %d: tier %+v beyond engine %+v", start, tr, e)
					}
				}
			}
		}
	})
}

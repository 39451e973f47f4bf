package kvevents

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/internal/testkit/golden"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/vllm"
)

// Tests against the golden vectors: bytes vLLM's own code wrote
// (ZmqEventPublisher framing, msgspec payloads of vLLM's structs), with the
// values they decode to. See internal/testkit/golden.

// goldenRelease is the vLLM release profile of the vectors' commit (vLLM main
// of 2026-08-07, after #49230, before #50620 and #51481); its KV rules are
// those of "latest" too.
var goldenRelease = vllm.MustParse("main-pre-50620")

// goldenKV is the values object of one kv-events vector.
type goldenKV struct {
	Message  string          `json:"message"`
	Topic    string          `json:"topic"`
	Seq      json.Number     `json:"seq"`
	StartSeq json.Number     `json:"start_seq"`
	Decoded  json.RawMessage `json:"decoded"`
}

// goldenBatch is values.decoded of a batch vector.
type goldenBatch struct {
	TS     float64                      `json:"ts"`
	Events []map[string]json.RawMessage `json:"events"`
	Rank   *json.Number                 `json:"data_parallel_rank"`
}

func jsonDecode(raw []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	return d.Decode(v)
}

// goldenHash reads a hash as the vectors render it: a JSON number, a
// decimal string (2^53 and above) or {"hex": digest}.
func goldenHash(raw json.RawMessage) (Hash, error) {
	var v any
	if err := jsonDecode(raw, &v); err != nil {
		return Hash{}, err
	}
	switch x := v.(type) {
	case json.Number:
		u, err := strconv.ParseUint(x.String(), 10, 64)
		return IntHash(u), err
	case string:
		u, err := strconv.ParseUint(x, 10, 64)
		return IntHash(u), err
	case map[string]any:
		b, err := hex.DecodeString(fmt.Sprint(x["hex"]))
		if err != nil {
			return Hash{}, err
		}
		h, ok := BytesHash(b)
		if !ok {
			return Hash{}, fmt.Errorf("bin hash of %d bytes", len(b))
		}
		return h, nil
	}
	return Hash{}, fmt.Errorf("hash %s", raw)
}

// goldenMsgpack writes a JSON-rendered value as msgspec writes the Python
// value: str, smallest int, float64, nil, arrays, {"hex"} as bin.
func goldenMsgpack(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return msgp.AppendNil(b), nil
	case string:
		return msgp.AppendString(b, x), nil
	case json.Number:
		if i, err := strconv.ParseInt(x.String(), 10, 64); err == nil {
			return appendInt(b, i), nil
		}
		f, err := x.Float64()
		return msgp.AppendFloat64(b, f), err
	case []any:
		b = msgp.AppendArrayHeader(b, uint32(len(x)))
		for _, e := range x {
			var err error
			if b, err = goldenMsgpack(b, e); err != nil {
				return nil, err
			}
		}
		return b, nil
	case map[string]any:
		h, ok := x["hex"].(string)
		if !ok || len(x) != 1 {
			return nil, fmt.Errorf("object %v", x)
		}
		d, err := hex.DecodeString(h)
		return msgp.AppendBytes(b, d), err
	}
	return nil, fmt.Errorf("value %T", v)
}

// goldenEvent builds the Event a vector's values describe; keys lists
// the fields the rendering holds (a later struct's fields are present only
// in the kv-later-* vectors).
func goldenEvent(m map[string]json.RawMessage) (Event, error) {
	var ev Event
	var tag string
	if err := json.Unmarshal(m["type"], &tag); err != nil {
		return ev, err
	}
	switch tag {
	case "BlockStored":
		ev.Type = BlockStored
	case "BlockRemoved":
		ev.Type = BlockRemoved
	case "AllBlocksCleared":
		ev.Type = AllBlocksCleared
	default:
		return ev, fmt.Errorf("type %q", tag)
	}
	optInt := func(k string) (Opt[int64], error) {
		var n *json.Number
		if raw, ok := m[k]; !ok || string(raw) == "null" {
			return Opt[int64]{}, nil
		} else if err := jsonDecode(raw, &n); err != nil {
			return Opt[int64]{}, err
		}
		v, err := n.Int64()
		return Some[int64](v), err
	}
	optStr := func(k string) (Opt[string], error) {
		var s *string
		if raw, ok := m[k]; ok {
			if err := json.Unmarshal(raw, &s); err != nil {
				return Opt[string]{}, err
			}
		}
		if s == nil {
			return Opt[string]{}, nil
		}
		return Some(*s), nil
	}
	var err error
	for k, raw := range m {
		switch k {
		case "type":
		case "block_hashes":
			var hs []json.RawMessage
			if err = json.Unmarshal(raw, &hs); err != nil {
				return ev, err
			}
			ev.BlockHashes = []Hash{}
			for _, h := range hs {
				x, err := goldenHash(h)
				if err != nil {
					return ev, err
				}
				ev.BlockHashes = append(ev.BlockHashes, x)
			}
		case "parent_block_hash":
			if string(raw) != "null" {
				ev.ParentBlockHash.V, err = goldenHash(raw)
				ev.ParentBlockHash.Valid = true
			}
		case "token_ids":
			ev.TokenIDs = []int64{}
			err = json.Unmarshal(raw, &ev.TokenIDs)
		case "block_size":
			err = json.Unmarshal(raw, &ev.BlockSize)
		case "lora_id":
			ev.LoraID, err = optInt(k)
		case "medium":
			ev.Medium, err = optStr(k)
		case "lora_name":
			ev.LoraName, err = optStr(k)
		case "extra_keys":
			var ks []any
			if err = jsonDecode(raw, &ks); err != nil || ks == nil {
				break
			}
			ev.HasExtraKeys = true
			ev.ExtraKeys = [][]byte{}
			for _, x := range ks {
				var e []byte
				if e, err = goldenMsgpack(nil, x); err != nil {
					return ev, err
				}
				ev.ExtraKeys = append(ev.ExtraKeys, e)
			}
		case "group_idx":
			ev.GroupIdx, err = optInt(k)
		case "kv_cache_spec_kind":
			ev.KVCacheSpecKind, err = optStr(k)
		case "kv_cache_spec_sliding_window":
			ev.KVCacheSpecSlidingWindow, err = optInt(k)
		case "locality":
			ev.Locality, err = optStr(k)
		case "ownership":
			ev.Ownership, err = optStr(k)
		case "session_id":
			ev.SessionID, err = optStr(k)
		default:
			return ev, fmt.Errorf("field %q unknown to the test", k)
		}
		if err != nil {
			return ev, fmt.Errorf("%s: %v", k, err)
		}
	}
	return ev, nil
}

// describeGolden is describe with each extra_keys entry as its msgpack
// bytes (an absent entry, nil, as c0) and the flags.
func describeGolden(e *Event) string {
	c := *e
	c.ExtraKeys = nil
	for _, k := range e.ExtraKeys {
		if len(k) == 0 {
			k = []byte{0xc0}
		}
		c.ExtraKeys = append(c.ExtraKeys, k)
	}
	return fmt.Sprintf("%s placeholder=%v skipped=%d", describe(&c), e.placeholder(), e.SkippedBlocks())
}

// TestGoldenKVEvents decodes every kv-events vector with the code paths the
// Subscriber and Publisher use (parseLive, parseReply, parseRequest,
// DecodeBatch), compares every field with the vector's values, and encodes
// the values back (AppendBatch, map form: what vLLM main sends), comparing
// bytes with vLLM's.
func TestGoldenKVEvents(t *testing.T) {
	vs := golden.Load(t, "kv-events")
	if len(vs) < 38 {
		t.Fatalf("%d kv-events vectors, want at least 38", len(vs))
	}
	kinds := map[string]int{}
	for _, v := range vs {
		t.Run(v.ID, func(t *testing.T) {
			if !v.ByteExact {
				t.Fatalf("vector not byte_exact: every kv-events vector is, the test expects it")
			}
			frames, err := v.Frames()
			if err != nil {
				t.Fatal(err)
			}
			var val goldenKV
			if err := jsonDecode(v.Values, &val); err != nil {
				t.Fatal(err)
			}
			kinds[val.Message]++
			var topic []byte
			var seq uint64
			var payload []byte
			switch val.Message {
			case "kv_event_batch":
				if seq, payload, err = parseLive(frames, defaultMaxPayload); err != nil {
					t.Fatal(err)
				}
				topic = frames[0]
			case "kv_replay_reply":
				var end bool
				if seq, payload, end, err = parseReply(frames, val.Topic, defaultMaxPayload); err != nil || end {
					t.Fatalf("parseReply: end %v, %v", end, err)
				}
				topic = frames[1]
			case "kv_replay_end":
				if _, _, end, err := parseReply(frames, "", defaultMaxPayload); err != nil || !end {
					t.Fatalf("parseReply: end %v, %v", end, err)
				}
				if val.Seq.String() != "-1" {
					t.Fatalf("end seq %s", val.Seq)
				}
				// What the Publisher sends after the replies.
				if want := [][]byte{{}, {}, unhex(t, vecEndOfReplay), {}}; !framesEqual(frames, want) {
					t.Fatalf("end marker %x, the publisher sends %x", frames, want)
				}
				return
			case "kv_replay_request":
				id, start, err := parseRequest(append([][]byte{[]byte("peer")}, frames...))
				if err != nil || string(id) != "peer" || strconv.FormatUint(start, 10) != val.StartSeq.String() {
					t.Fatalf("parseRequest: %q %d %v (want start %s)", id, start, err, val.StartSeq)
				}
				// What the Subscriber's replay session sends.
				if want := replayRequest(start); !framesEqual(frames, want) {
					t.Fatalf("request %x, the subscriber sends %x", frames, want)
				}
				return
			default:
				t.Fatalf("message %q unknown to the test", val.Message)
			}
			if string(topic) != val.Topic || strconv.FormatUint(seq, 10) != val.Seq.String() {
				t.Fatalf("topic %q seq %d, want %q %s", topic, seq, val.Topic, val.Seq)
			}
			var gb goldenBatch
			if err := jsonDecode(val.Decoded, &gb); err != nil {
				t.Fatal(err)
			}
			want := make([]Event, len(gb.Events))
			for i, m := range gb.Events {
				if want[i], err = goldenEvent(m); err != nil {
					t.Fatalf("event %d: %v", i, err)
				}
			}
			var rank Opt[int64]
			if gb.Rank != nil {
				r, err := gb.Rank.Int64()
				if err != nil {
					t.Fatal(err)
				}
				rank = Some[int64](r)
			}

			var b Batch
			var drops []eventDrop
			if err := decodeBatch(payload, limits{}, &b, func(d eventDrop) { drops = append(drops, d) }); err != nil {
				t.Fatal(err)
			}
			if len(drops) != 0 || b.DroppedEvents != 0 {
				t.Fatalf("dropped %d events: %v", b.DroppedEvents, drops)
			}
			if math.Float64bits(b.TS) != math.Float64bits(gb.TS) || b.DataParallelRank != rank {
				t.Fatalf("ts %v rank %v, want %v %v", b.TS, b.DataParallelRank, gb.TS, rank)
			}
			if len(b.Events) != len(want) {
				t.Fatalf("%d events, want %d", len(b.Events), len(want))
			}
			for i := range want {
				if got, w := describeGolden(&b.Events[i]), describeGolden(&want[i]); got != w || b.Index[i] != i {
					t.Errorf("event %d:\n got %s\nwant %s", i, got, w)
				}
			}

			enc := AppendBatch(nil, gb.TS, want, rank, goldenRelease.Rules().KVEventsMapForm)
			if !bytes.Equal(enc, payload) {
				t.Fatalf("AppendBatch differs from vLLM's bytes:\n got %x\nwant %x", enc, payload)
			}
		})
	}
	t.Logf("messages: %v", kinds)
}

func framesEqual(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// replayRequest is the request the Subscriber's replay session sends.
func replayRequest(start uint64) [][]byte {
	var req [8]byte
	binary.BigEndian.PutUint64(req[:], start)
	return [][]byte{{}, req[:]}
}

// goldenShapes: the real shapes the issue is about, on vLLM's own bytes,
// with what the Event says about them.
func TestGoldenKVShapes(t *testing.T) {
	byID := map[string]golden.Vector{}
	for _, v := range golden.Load(t, "kv-events") {
		byID[v.ID] = v
	}
	decode := func(t *testing.T, id string) *Batch {
		t.Helper()
		v, ok := byID[id]
		if !ok {
			t.Fatalf("vector %s missing", id)
		}
		frames, err := v.Frames()
		if err != nil {
			t.Fatal(err)
		}
		b := &Batch{}
		if err := decodeBatch(frames[len(frames)-1], limits{}, b, nil); err != nil || b.DroppedEvents != 0 {
			t.Fatalf("%s: %v, %d dropped", id, err, b.DroppedEvents)
		}
		return b
	}
	t.Run("offload placeholder", func(t *testing.T) {
		for _, id := range []string{"kv-offload-placeholder-store", "kv-offload-placeholder-storage-remote"} {
			e := decode(t, id).Events[0]
			if !e.placeholder() || e.BlockSize != 0 || len(e.TokenIDs) != 0 || len(e.BlockHashes) != 1 || !e.Medium.Valid {
				t.Errorf("%s: %s", id, describeGolden(&e))
			}
		}
		e := decode(t, "kv-offload-placeholder-storage-remote").Events[0]
		if e.Medium != Some("STORAGE") || e.Locality != Some("REMOTE") || !e.BlockHashes[0].isBytes() {
			t.Errorf("storage placeholder: %s", describeGolden(&e))
		}
		rm := decode(t, "kv-offload-placeholder-remove").Events[0]
		st := decode(t, "kv-offload-placeholder-store").Events[0]
		if rm.Type != BlockRemoved || rm.BlockHashes[0] != st.BlockHashes[0] || rm.Medium != st.Medium {
			t.Errorf("the remove does not match the store: %s / %s", describeGolden(&rm), describeGolden(&st))
		}
	})
	t.Run("offload self-describing", func(t *testing.T) {
		for _, e := range decode(t, "kv-offload-self-describing-store").Events {
			if e.placeholder() || e.SkippedBlocks() != 0 || e.Medium != Some("CPU") || e.Locality != Some("LOCAL") || e.BlockSize <= 0 {
				t.Errorf("%s", describeGolden(&e))
			}
		}
	})
	t.Run("hybrid groups", func(t *testing.T) {
		for _, id := range []string{"kv-gpu-hybrid-swa", "kv-gpu-mla-mamba"} {
			b := decode(t, id)
			groups := map[int64]string{}
			for _, e := range b.Events {
				if e.placeholder() || !e.GroupIdx.Valid || !e.KVCacheSpecKind.Valid {
					t.Errorf("%s: %s", id, describeGolden(&e))
				}
				groups[e.GroupIdx.V] = e.KVCacheSpecKind.V
			}
			if len(groups) < 2 {
				t.Errorf("%s: groups %v", id, groups)
			}
			t.Logf("%s: groups %v", id, groups)
		}
	})
	t.Run("later fields", func(t *testing.T) {
		e := decode(t, "kv-later-stored-both").Events[0]
		if e.SessionID != Some("conv-9f2c") || e.Ownership != Some("obj") || e.Locality != Some("REMOTE") {
			t.Errorf("stored-both: %s", describeGolden(&e))
		}
		m := decode(t, "kv-later-mixed").Events
		if len(m) != 3 || m[0].SessionID != Some("s1") || m[0].Ownership.Valid || m[1].Ownership != Some("kvcr") || m[2].Type != AllBlocksCleared {
			t.Errorf("mixed: %v", m)
		}
	})
	t.Run("rank nil", func(t *testing.T) {
		v := byID["kv-dp-rank-nil"]
		frames, _ := v.Frames()
		p := frames[2]
		// [ts, events, nil]: msgspec writes all three elements.
		if p[0] != 0x93 || p[len(p)-1] != 0xc0 {
			t.Fatalf("payload %x", p)
		}
		if b := decode(t, "kv-dp-rank-nil"); b.DataParallelRank.Valid {
			t.Fatalf("rank %v", b.DataParallelRank)
		}
	})
}

// TestGoldenPublisherReplay: the Publisher's replay service answers a
// request with exactly the frames vLLM's ZmqEventPublisher sent in the
// golden vectors (kv-replay-reply-seq1, -seq2, kv-replay-end), for the same
// values published under the same topic; the request is kv-replay-request.
func TestGoldenPublisherReplay(t *testing.T) {
	byID := map[string]golden.Vector{}
	for _, v := range golden.Load(t, "kv-events") {
		byID[v.ID] = v
	}
	want := [][][]byte{}
	p, err := NewPublisher(PublisherConfig{Release: goldenRelease, Endpoint: "tcp://127.0.0.1:0", Bind: true,
		ReplayEndpoint: "tcp://127.0.0.1:0", Topic: "kv-events", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.publishBatch(0, nil, Some[int64](0)); err != nil { // seq 0, not asked for
		t.Fatal(err)
	}
	for _, id := range []string{"kv-replay-reply-seq1", "kv-replay-reply-seq2", "kv-replay-end"} {
		v, ok := byID[id]
		if !ok {
			t.Fatalf("vector %s missing", id)
		}
		frames, err := v.Frames()
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, frames)
		if id == "kv-replay-end" {
			break
		}
		var val goldenKV
		var gb goldenBatch
		if err := jsonDecode(v.Values, &val); err != nil {
			t.Fatal(err)
		}
		if err := jsonDecode(val.Decoded, &gb); err != nil {
			t.Fatal(err)
		}
		evs := make([]Event, len(gb.Events))
		for i, m := range gb.Events {
			if evs[i], err = goldenEvent(m); err != nil {
				t.Fatal(err)
			}
		}
		r, _ := gb.Rank.Int64()
		if err := p.publishBatch(gb.TS, evs, Some[int64](r)); err != nil {
			t.Fatal(err)
		}
	}
	poll.WaitFor(t, waitTimeout, "3 batches sent", func() bool { return p.Stats().Published == 3 })
	req, err := byID["kv-replay-request"].Frames()
	if err != nil {
		t.Fatal(err)
	}
	d, err := socket.New("DEALER", socket.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Dial(p.ReplayEndpoint()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := d.Send(ctx, req...); err != nil {
		t.Fatal(err)
	}
	for i, w := range want {
		msg, err := d.Recv(ctx)
		if err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		if !framesEqual(msg.Frames, w) {
			t.Fatalf("reply %d:\n got %x\nwant %x (vLLM's)", i, msg.Frames, w)
		}
	}
}

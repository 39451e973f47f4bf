package kvevents

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/golden"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/socket"
)

// Tests against the SGLang golden vectors (internal/testkit/golden/testdata/sglang):
// bytes SGLang's own code wrote (its ZmqEventPublisher framing, msgspec
// payloads of its array_like structs: signed int64 hashes, its media names,
// one block per page, replay without a topic frame), with the values they
// decode to.

// sglangKV is the values object of one SGLang kv-events vector.
type sglangKV struct {
	Message      string          `json:"message"`
	Topic        string          `json:"topic"`
	Seq          json.Number     `json:"seq"`
	StartSeq     json.Number     `json:"start_seq"`
	AnsweredWith []string        `json:"answered_with"`
	Decoded      json.RawMessage `json:"decoded"`
}

// sglangBatch is values.decoded of an SGLang batch vector.
type sglangBatch struct {
	TS     float64                      `json:"ts"`
	Events []map[string]json.RawMessage `json:"events"`
	Rank   *json.Number                 `json:"attn_dp_rank"`
}

// sglangHash reads a hash as the SGLang vectors render it: the signed int64
// SGLang holds, as a JSON number or (2^53 and above in magnitude) a decimal
// string.
func sglangHash(raw json.RawMessage) (Hash, error) {
	v, err := strconv.ParseInt(strings.Trim(string(raw), `"`), 10, 64)
	return SignedHash(v), err
}

// sglangEvent builds the Event an SGLang vector's values describe, every
// field included; keys lists the fields in the order the rendering holds
// them (SGLang's declaration order).
func sglangEvent(m map[string]json.RawMessage) (ev Event, err error) {
	rest := map[string]json.RawMessage{}
	for k, v := range m {
		switch k {
		case "block_hashes", "parent_block_hash", "token_ids":
		default:
			rest[k] = v
		}
	}
	if ev, err = goldenEvent(rest); err != nil {
		return ev, err
	}
	if raw, ok := m["block_hashes"]; ok {
		var hs []json.RawMessage
		if err := json.Unmarshal(raw, &hs); err != nil {
			return ev, err
		}
		ev.BlockHashes = []Hash{}
		for _, r := range hs {
			h, err := sglangHash(r)
			if err != nil {
				return ev, err
			}
			ev.BlockHashes = append(ev.BlockHashes, h)
		}
	}
	if raw, ok := m["parent_block_hash"]; ok && string(raw) != "null" {
		if ev.ParentBlockHash.V, err = sglangHash(raw); err != nil {
			return ev, err
		}
		ev.ParentBlockHash.Valid = true
	}
	if raw, ok := m["token_ids"]; ok {
		var pairs [][]int64
		if json.Unmarshal(raw, &pairs) == nil && len(pairs) > 0 {
			ev.TokenPairs, ev.TokenIDs = true, []int64{}
			for _, p := range pairs {
				if len(p) != 2 {
					return ev, fmt.Errorf("token pair %v", p)
				}
				ev.TokenIDs = append(ev.TokenIDs, p...)
			}
		} else if err := json.Unmarshal(raw, &ev.TokenIDs); err != nil {
			return ev, err
		}
	}
	return ev, nil
}

// sglangFieldsOf is how many elements an SGLang event array has after its
// tag, by type (SGLang's disaggregation/kv_events.py).
var sglangFieldsOf = map[string]int{"BlockStored": 6, "BlockRemoved": 2, "AllBlocksCleared": 0}

// renderHashes renders hashes as the SGLang vectors do: the signed value,
// a JSON number below 2^53 in magnitude, else a decimal string.
func renderHashes(hs []Hash) string {
	var b strings.Builder
	for i, h := range hs {
		if i > 0 {
			b.WriteByte(',')
		}
		v := int64(h.Uint64())
		if v >= 1<<53 || v <= -(1<<53) {
			b.WriteString(strconv.Quote(h.String()))
		} else {
			b.WriteString(h.String())
		}
	}
	return "[" + b.String() + "]"
}

// sglangVectors loads the SGLang kv-events vectors by id, in file order.
func sglangVectors(t testing.TB) ([]golden.Vector, map[string]golden.Vector) {
	t.Helper()
	vs := golden.LoadSGLang(t, "kv-events")
	if len(vs) < 29 {
		t.Fatalf("%d SGLang kv-events vectors, want at least 29", len(vs))
	}
	byID := map[string]golden.Vector{}
	for _, v := range vs {
		byID[v.ID] = v
	}
	return vs, byID
}

// sglangValues returns a batch or reply vector's events, ts and rank from
// its values (not from its bytes).
func sglangValues(t testing.TB, v golden.Vector) (val sglangKV, ts float64, evs []Event, rank Opt[int64]) {
	t.Helper()
	if err := jsonDecode(v.Values, &val); err != nil {
		t.Fatal(err)
	}
	if val.Decoded == nil {
		return val, 0, nil, rank
	}
	var gb sglangBatch
	if err := jsonDecode(val.Decoded, &gb); err != nil {
		t.Fatal(err)
	}
	evs = make([]Event, len(gb.Events))
	for i, m := range gb.Events {
		var err error
		if evs[i], err = sglangEvent(m); err != nil {
			t.Fatalf("%s event %d: %v", v.ID, i, err)
		}
		if n, ok := sglangFieldsOf[evs[i].Type]; !ok || len(m) != n+1 {
			t.Fatalf("%s event %d: %d keys for a %s", v.ID, i, len(m), evs[i].Type)
		}
	}
	if gb.Rank != nil {
		r, err := gb.Rank.Int64()
		if err != nil {
			t.Fatal(err)
		}
		rank = Some[int64](r)
	}
	return val, gb.TS, evs, rank
}

// TestGoldenSGLangKVEvents decodes every SGLang vector with the code paths
// the Subscriber uses (parseLive, parseReply, parseRequest, DecodeBatch:
// the one-pass and the checked decoder alike), compares every field with
// the vector's values — signed hashes (their String is SGLang's value),
// media names, nil fields, bigram token pairs — and encodes the values back
// in SGLang's form, comparing bytes with SGLang's.
func TestGoldenSGLangKVEvents(t *testing.T) {
	vs, _ := sglangVectors(t)
	kinds := map[string]int{}
	negative := 0
	for _, v := range vs {
		t.Run(v.ID, func(t *testing.T) {
			if !v.ByteExact || v.SGLangCommit == "" {
				t.Fatalf("vector not byte_exact or without its SGLang commit")
			}
			frames, err := v.Frames()
			if err != nil {
				t.Fatal(err)
			}
			val, ts, want, rank := sglangValues(t, v)
			kinds[val.Message]++
			var seq uint64
			var payload []byte
			switch val.Message {
			case "kv_event_batch":
				if seq, payload, err = parseLive(frames, defaultMaxPayload); err != nil {
					t.Fatal(err)
				}
				if string(frames[0]) != val.Topic {
					t.Fatalf("topic %q, want %q", frames[0], val.Topic)
				}
			case "kv_replay_reply":
				var end bool
				// SGLang's replies carry no topic frame, whatever the
				// subscription's topic.
				if seq, payload, end, err = parseReply(frames, "kv-events", defaultMaxPayload); err != nil || end || len(frames) != 3 {
					t.Fatalf("parseReply: end %v, %v (%d frames)", end, err, len(frames))
				}
			case "kv_replay_end":
				s, _, end, err := parseReply(frames, "kv-events", defaultMaxPayload)
				if err != nil || !end || s != replayEndSeq || val.Seq.String() != "-1" {
					t.Fatalf("parseReply: seq %x end %v, %v", s, end, err)
				}
				return
			case "kv_replay_request":
				id, start, err := parseRequest(append([][]byte{[]byte("peer")}, frames...))
				if err != nil || string(id) != "peer" || strconv.FormatUint(start, 10) != val.StartSeq.String() {
					t.Fatalf("parseRequest: %q %d %v (want start %s)", id, start, err, val.StartSeq)
				}
				if want := replayRequest(start); !framesEqual(frames, want) {
					t.Fatalf("request %x, the subscriber sends %x", frames, want)
				}
				return
			default:
				t.Fatalf("message %q unknown to the test", val.Message)
			}
			if strconv.FormatUint(seq, 10) != val.Seq.String() {
				t.Fatalf("seq %d, want %s", seq, val.Seq)
			}
			// Both decoders, and DecodeBatch, must yield the values.
			for name, dec := range map[string]func([]byte, limits, *Batch, func(eventDrop)) error{
				"DecodeBatch": decodeBatch, "oracle": decodeChecked} {
				var b Batch
				var drops []eventDrop
				if err := dec(payload, limits{}, &b, func(d eventDrop) { drops = append(drops, d) }); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if len(drops) != 0 || b.DroppedEvents != 0 || b.UnknownFields != 0 {
					t.Fatalf("%s: dropped %d events (%v), %d unknown fields", name, b.DroppedEvents, drops, b.UnknownFields)
				}
				if math.Float64bits(b.TS) != math.Float64bits(ts) || b.DataParallelRank != rank || len(b.Events) != len(want) {
					t.Fatalf("%s: ts %v rank %v %d events, want %v %v %d", name, b.TS, b.DataParallelRank, len(b.Events), ts, rank, len(want))
				}
				for i := range want {
					if d := sameEvent(&b.Events[i], &want[i]); d != "" || b.Index[i] != i {
						t.Errorf("%s: event %d: %s", name, i, d)
					}
				}
			}
			// Shown as SGLang holds them: the signed value.
			var gb sglangBatch
			if err := jsonDecode(val.Decoded, &gb); err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if _, ok := gb.Events[i]["block_hashes"]; !ok {
					continue // AllBlocksCleared
				}
				if got, w := renderHashes(want[i].BlockHashes), compactJSON(t, gb.Events[i]["block_hashes"]); got != w {
					t.Errorf("event %d: hashes shown as %s, SGLang holds %s", i, got, w)
				}
				for _, h := range want[i].BlockHashes {
					if int64(h.Uint64()) < 0 {
						negative++
					}
				}
			}
			enc := appendBatch(nil, ts, want, rank, formSGLang)
			if !bytes.Equal(enc, payload) {
				t.Fatalf("SGLang encoding differs from SGLang's bytes:\n got %x\nwant %x", enc, payload)
			}
		})
	}
	if kinds["kv_event_batch"] != 22 || kinds["kv_replay_reply"] != 3 || kinds["kv_replay_request"] != 3 || kinds["kv_replay_end"] != 1 {
		t.Errorf("messages %v", kinds)
	}
	if negative == 0 {
		t.Errorf("no negative hash among the vectors")
	}
	t.Logf("messages: %v, negative hashes: %d", kinds, negative)
}

func compactJSON(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestSignedHash: a hash sent as a negative integer is shown signed and
// written back signed at msgpack's smallest width; a non-negative one is
// the same Hash whichever engine sent it.
func TestSignedHash(t *testing.T) {
	for _, c := range []struct {
		v    int64
		wire string
	}{{-1, "ff"}, {-32, "e0"}, {-33, "d0df"}, {-129, "d1ff7f"}, {-32769, "d2ffff7fff"},
		{-2147483649, "d3ffffffff7fffffff"}, {math.MinInt64, "d38000000000000000"}, {0, "00"}, {math.MaxInt64, "cf7fffffffffffffff"}} {
		h := SignedHash(c.v)
		if h.String() != strconv.FormatInt(c.v, 10) || h.Uint64() != uint64(c.v) {
			t.Errorf("SignedHash(%d): %s %d", c.v, h, h.Uint64())
		}
		if got := fmt.Sprintf("%x", appendHash(nil, h)); got != c.wire {
			t.Errorf("SignedHash(%d) written %s, want %s", c.v, got, c.wire)
		}
		back, _, err := readHash(appendHash(nil, h))
		if err != nil || back != h {
			t.Errorf("SignedHash(%d) read back %v %v", c.v, back, err)
		}
		fast, _, err := hashAt(appendHash(nil, h), 0)
		if err != nil || fast != h {
			t.Errorf("SignedHash(%d) read back by the one-pass decoder %v %v", c.v, fast, err)
		}
	}
	if SignedHash(5) != IntHash(5) || SignedHash(-1) == IntHash(math.MaxUint64) {
		t.Errorf("SignedHash equality")
	}
	if IntHash(math.MaxUint64).String() != "18446744073709551615" {
		t.Errorf("an unsigned hash shown as %s", IntHash(math.MaxUint64))
	}
}

// TestGoldenSGLangPublisher: a Publisher with Engine "sglang" sends SGLang's
// own bytes: its live frames are sg-topic-set's, and its replay ROUTER
// answers each of SGLang's replay requests with exactly the frames SGLang's
// ROUTER sent (answered_with: replies without a topic frame, then the
// 3-frame end marker).
func TestGoldenSGLangPublisher(t *testing.T) {
	_, byID := sglangVectors(t)
	p, err := NewPublisher(PublisherConfig{Engine: "sglang", Endpoint: "tcp://127.0.0.1:0", Bind: true,
		ReplayEndpoint: "tcp://127.0.0.1:0", Topic: "kv-events", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, err := socket.New("SUB", socket.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sub.Subscribe(nil); err != nil {
		t.Fatal(err)
	}
	if err := sub.Dial(p.Endpoint()); err != nil {
		t.Fatal(err)
	}
	// The XPUB has applied the subscription once it delivered it.
	poll.WaitFor(t, waitTimeout, "the subscription", func() bool { return p.pub.Stats().Received >= 1 })
	// The publisher's batches 0, 1, 2: the values of the replies SGLang's
	// ROUTER sent (its publisher's topic was kv-events).
	for _, id := range []string{"sg-replay-reply-seq0", "sg-replay-reply-seq1", "sg-replay-reply-seq2"} {
		_, ts, evs, rank := sglangValues(t, byID[id])
		if err := p.publishBatch(ts, evs, rank); err != nil {
			t.Fatal(err)
		}
	}
	live, err := sub.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want, err := byID["sg-topic-set"].Frames()
	if err != nil {
		t.Fatal(err)
	}
	if !framesEqual(live.Frames, want) {
		t.Fatalf("live frames\n got %x\nwant %x (SGLang's)", live.Frames, want)
	}
	poll.WaitFor(t, waitTimeout, "3 batches sent", func() bool { return p.Stats().Published == 3 })
	for _, id := range []string{"sg-replay-request-seq0", "sg-replay-request-seq1", "sg-replay-request-seq5"} {
		t.Run(id, func(t *testing.T) {
			v := byID[id]
			var val sglangKV
			if err := jsonDecode(v.Values, &val); err != nil {
				t.Fatal(err)
			}
			req, err := v.Frames()
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
			if err := d.Send(ctx, req...); err != nil {
				t.Fatal(err)
			}
			for i, aid := range val.AnsweredWith {
				w, err := byID[aid].Frames()
				if err != nil {
					t.Fatal(err)
				}
				msg, err := d.Recv(ctx)
				if err != nil {
					t.Fatalf("reply %d: %v", i, err)
				}
				if !framesEqual(msg.Frames, w) {
					t.Fatalf("reply %d:\n got %x\nwant %x (SGLang's %s)", i, msg.Frames, w, aid)
				}
			}
		})
		// One replay per connection per ReplayInterval: a new DEALER each.
	}
}

// TestPublisherEngine: an unknown Engine is refused, naming the value;
// SGLang's bind rule binds a 0.0.0.0 endpoint (SGLang PR #25844) that
// vLLM's rule would dial.
func TestPublisherEngine(t *testing.T) {
	if _, err := NewPublisher(PublisherConfig{Engine: "tgi", Endpoint: "tcp://127.0.0.1:0", Bind: true, Logger: quiet}); err == nil ||
		!strings.Contains(err.Error(), `"tgi"`) {
		t.Fatalf("Engine tgi: %v", err)
	}
	p, err := NewPublisher(PublisherConfig{Engine: "sglang", Endpoint: "tcp://0.0.0.0:0", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Endpoint() == "" {
		t.Fatalf("sglang publisher on 0.0.0.0 was not bound")
	}
}

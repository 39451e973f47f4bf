package handshake

import (
	"bytes"
	"encoding/hex"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/tinylib/msgp/msgp"
	"go.uber.org/goleak"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/ref/nixlwire"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sampleMetadata exercises every field, every int width, negative ints,
// addresses on both sides of 2^32, None and empty lists, and non-ASCII
// text. pySampleMetadata is the same value as a Python dict literal, in
// field order.
func sampleMetadata() nixlwire.NixlAgentMetadata {
	return nixlwire.NixlAgentMetadata{
		EngineID:                        "prefill-engine-0",
		AgentMetadata:                   []byte{0x00, 0x01, 0xfe, 0xff, 0x1b},
		KVCachesBaseAddr:                []uint64{0x7f3a00000000, 4096, 1<<32 - 1, 1 << 32, math.MaxUint64},
		DeviceID:                        3,
		NumBlocks:                       40000,
		BlockLens:                       []nixlwire.Int{65536, 200, 127, 128},
		BlockStrides:                    []nixlwire.Int{131072, -1, -32, -33, -200, -40000, math.MinInt64},
		KVCacheLayout:                   "HND",
		BlockSize:                       16,
		SSMSizes:                        [2]nixlwire.Int{0, 300},
		AttnBackendName:                 "FLASH_ATTN",
		PhysicalBlocksPerLogicalKVBlock: 1,
		RegionNumBlocks:                 nixlwire.Nullable([]nixlwire.Int{40000, 1 << 40}),
		RegionGroupIDs:                  nil,
		RegionNames:                     nixlwire.Nullable([]string{"model.layers.0.self_attn", "ε-région"}),
		RegionMemTypes:                  nixlwire.Nullable([]string{}),
		DCPSize:                         1,
		PCPSize:                         2,
		RegionMembers:                   [][]string{{"a", "b"}, {}},
	}
}

const pySampleMetadata = `{
  "engine_id": "prefill-engine-0",
  "agent_metadata": b"\x00\x01\xfe\xff\x1b",
  "kv_caches_base_addr": [0x7f3a00000000, 4096, 2**32 - 1, 2**32, 2**64 - 1],
  "device_id": 3,
  "num_blocks": 40000,
  "block_lens": [65536, 200, 127, 128],
  "block_strides": [131072, -1, -32, -33, -200, -40000, -2**63],
  "kv_cache_layout": "HND",
  "block_size": 16,
  "ssm_sizes": (0, 300),
  "attn_backend_name": "FLASH_ATTN",
  "physical_blocks_per_logical_kv_block": 1,
  "region_num_blocks": [40000, 2**40],
  "region_group_ids": None,
  "region_names": ["model.layers.0.self_attn", "\u03b5-r\u00e9gion"],
  "region_mem_types": [],
  "dcp_size": 1,
  "pcp_size": 2,
  "region_members": [["a", "b"], []],
}`

// oldMetadata is what a release before block_strides and ssm_sizes sent:
// the first six fields plus kv_cache_layout and block_size.
func oldMetadata() nixlwire.NixlAgentMetadata {
	m := nixlwire.NixlAgentMetadata{
		EngineID:         "old-engine",
		AgentMetadata:    []byte("nixl"),
		KVCachesBaseAddr: []uint64{1 << 33},
		DeviceID:         0,
		NumBlocks:        1000,
		BlockLens:        []nixlwire.Int{4096},
		KVCacheLayout:    "NHD",
		BlockSize:        16,
		DCPSize:          1,
		PCPSize:          1,
	}
	return m
}

const pyOldMetadata = `{
  "engine_id": "old-engine",
  "agent_metadata": b"nixl",
  "kv_caches_base_addr": [2**33],
  "device_id": 0,
  "num_blocks": 1000,
  "block_lens": [4096],
  "kv_cache_layout": "NHD",
  "block_size": 16,
}`

// appendOldMetadata encodes oldMetadata's eight keys by hand, as Python
// does, with extra keys (that a later or foreign release might add)
// inserted before and after.
func appendOldMetadata(b []byte, extra bool) []byte {
	n := uint32(8)
	if extra {
		n += 3
	}
	b = msgp.AppendMapHeader(b, n)
	if extra {
		b = msgp.AppendString(b, "zz_future_first")
		b = msgp.AppendMapHeader(b, 1)
		b = msgp.AppendString(b, "nested")
		b = msgp.AppendArrayHeader(b, 2)
		b = msgp.AppendNil(b)
		b = msgp.AppendFloat64(b, 1.5)
	}
	b = msgp.AppendString(b, "engine_id")
	b = msgp.AppendString(b, "old-engine")
	b = msgp.AppendString(b, "agent_metadata")
	b = msgp.AppendBytes(b, []byte("nixl"))
	b = msgp.AppendString(b, "kv_caches_base_addr")
	b = msgp.AppendArrayHeader(b, 1)
	b = msgp.AppendUint64(b, 1<<33)
	if extra {
		b = msgp.AppendString(b, "block_len") // a key some releases used
		b = msgp.AppendUint64(b, 4096)
	}
	b = msgp.AppendString(b, "device_id")
	b = msgp.AppendUint64(b, 0)
	b = msgp.AppendString(b, "num_blocks")
	b = msgp.AppendUint64(b, 1000)
	b = msgp.AppendString(b, "block_lens")
	b = msgp.AppendArrayHeader(b, 1)
	b = msgp.AppendUint64(b, 4096)
	b = msgp.AppendString(b, "kv_cache_layout")
	b = msgp.AppendString(b, "NHD")
	b = msgp.AppendString(b, "block_size")
	b = msgp.AppendUint64(b, 16)
	if extra {
		b = msgp.AppendString(b, "\x1b[31mred")
		b = msgp.AppendBytes(b, []byte{0xff, 0x00})
	}
	return b
}

func TestPayloadVector(t *testing.T) {
	want := mustHex(t, "82b2636f6d7061746962696c6974795f68617368d940"+strings.Repeat("61", 64)+
		"b46167656e745f6d657461646174615f6279746573c403010203")
	p := nixlwire.NixlHandshakePayload{CompatibilityHash: strings.Repeat("a", 64), AgentMetadataBytes: []byte{1, 2, 3}}
	got, err := p.MarshalMsg(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("MarshalMsg:\n got %x\nwant %x", got, want)
	}
	var buf bytes.Buffer
	w := msgp.NewWriter(&buf)
	if err := p.EncodeMsg(w); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("EncodeMsg:\n got %x\nwant %x", buf.Bytes(), want)
	}
	dec, err := nixlwire.DecodePayload(want)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(dec, p) {
		t.Fatalf("DecodePayload = %+v, want %+v", dec, p)
	}
	// The decoded bytes are a copy, not a view of the frame.
	frame := bytes.Clone(want)
	dec, _ = nixlwire.DecodePayload(frame)
	frame[len(frame)-1] = 0xee
	if dec.AgentMetadataBytes[2] != 3 {
		t.Fatal("AgentMetadataBytes aliases the input frame")
	}
	var streamed nixlwire.NixlHandshakePayload
	if err := streamed.DecodeMsg(msgp.NewReader(bytes.NewReader(want))); err != nil || !reflect.DeepEqual(streamed, p) {
		t.Fatalf("DecodeMsg = %+v, %v", streamed, err)
	}
}

// TestIntEncoding checks Int against the bytes Python's msgpack writes for
// the same int (fixed here; TestPythonInterop checks them live).
func TestIntEncoding(t *testing.T) {
	cases := []struct {
		v    int64
		want string
	}{
		{0, "00"}, {1, "01"}, {127, "7f"}, {128, "cc80"}, {255, "ccff"}, {256, "cd0100"},
		{65535, "cdffff"}, {65536, "ce00010000"}, {1<<32 - 1, "ceffffffff"}, {1 << 32, "cf0000000100000000"},
		{math.MaxInt64, "cf7fffffffffffffff"},
		{-1, "ff"}, {-32, "e0"}, {-33, "d0df"}, {-128, "d080"}, {-129, "d1ff7f"}, {-32768, "d18000"},
		{-32769, "d2ffff7fff"}, {math.MinInt32, "d280000000"}, {math.MinInt32 - 1, "d3ffffffff7fffffff"},
		{math.MinInt64, "d38000000000000000"},
	}
	for _, c := range cases {
		b, err := nixlwire.Int(c.v).MarshalMsg(nil)
		if err != nil {
			t.Fatal(err)
		}
		if hex.EncodeToString(b) != c.want {
			t.Errorf("nixlwire.Int(%d).MarshalMsg = %x, want %s", c.v, b, c.want)
		}
		var buf bytes.Buffer
		w := msgp.NewWriter(&buf)
		if err := nixlwire.Int(c.v).EncodeMsg(w); err != nil {
			t.Fatal(err)
		}
		_ = w.Flush()
		if hex.EncodeToString(buf.Bytes()) != c.want {
			t.Errorf("nixlwire.Int(%d).EncodeMsg = %x, want %s", c.v, buf.Bytes(), c.want)
		}
		var got nixlwire.Int
		if rest, err := got.UnmarshalMsg(b); err != nil || len(rest) != 0 || int64(got) != c.v {
			t.Errorf("UnmarshalMsg(%x) = %d, %x, %v", b, got, rest, err)
		}
		var got2 nixlwire.Int
		if err := got2.DecodeMsg(msgp.NewReader(bytes.NewReader(b))); err != nil || int64(got2) != c.v {
			t.Errorf("DecodeMsg(%x) = %d, %v", b, got2, err)
		}
		if len(b) > nixlwire.Int(c.v).Msgsize() {
			t.Errorf("Msgsize %d < len %d", nixlwire.Int(c.v).Msgsize(), len(b))
		}
	}
	// Signed encodings of non-negative values (what msgp or another
	// encoder may write) decode too; a uint64 over MaxInt64 does not.
	for _, s := range []string{"d000", "d10080", "d200010000", "d30000000100000000"} {
		var i nixlwire.Int
		if _, err := i.UnmarshalMsg(mustHex(t, s)); err != nil {
			t.Errorf("UnmarshalMsg(%s): %v", s, err)
		}
	}
	var i nixlwire.Int
	if _, err := i.UnmarshalMsg(mustHex(t, "cf8000000000000000")); err == nil {
		t.Error("uint64 2^63 decoded into an Int")
	}
	if _, err := i.UnmarshalMsg(mustHex(t, "a131")); err == nil {
		t.Error(`str "1" decoded into an Int`)
	}
}

func TestAgentMetadataRoundTrip(t *testing.T) {
	m := sampleMetadata()
	b, err := m.MarshalMsg(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > m.Msgsize() {
		t.Errorf("Msgsize %d < encoded length %d", m.Msgsize(), len(b))
	}
	got, err := nixlwire.DecodeAgentMetadata(b)
	if err != nil {
		t.Fatal(err)
	}
	if !sameMetadata(t, got, m) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, m)
	}
	// None and [] stay apart.
	if got.RegionGroupIDs != nil || got.RegionMemTypes == nil || len(*got.RegionMemTypes) != 0 {
		t.Fatalf("nullable lists: group ids %v, mem types %v", got.RegionGroupIDs, got.RegionMemTypes)
	}
	// The streaming codec writes the same bytes.
	var buf bytes.Buffer
	w := msgp.NewWriter(&buf)
	if err := m.EncodeMsg(w); err != nil {
		t.Fatal(err)
	}
	_ = w.Flush()
	if !bytes.Equal(buf.Bytes(), b) {
		t.Fatalf("EncodeMsg differs from MarshalMsg:\n%x\n%x", buf.Bytes(), b)
	}
	var streamed nixlwire.NixlAgentMetadata
	streamed.Reset()
	if err := streamed.DecodeMsg(msgp.NewReader(bytes.NewReader(b))); err != nil || !sameMetadata(t, streamed, m) {
		t.Fatalf("DecodeMsg = %+v, %v", streamed, err)
	}

	// Payload wrapping and unwrapping.
	p, err := nixlwire.NewPayload(strings.Repeat("0", 64), &m)
	if err != nil {
		t.Fatal(err)
	}
	pb, _ := p.MarshalMsg(nil)
	p2, err := nixlwire.DecodePayload(pb)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := p2.AgentMetadata()
	if err != nil || !sameMetadata(t, m2, m) {
		t.Fatalf("payload round trip: %+v, %v", m2, err)
	}
}

func TestAgentMetadataEncodingDetails(t *testing.T) {
	m := sampleMetadata()
	b, _ := m.MarshalMsg(nil)
	for _, want := range []string{
		"de0013a9656e67696e655f6964",                                               // map16 of 19 keys, then "engine_id"
		"b070726566696c6c2d656e67696e652d30",                                       // engine_id as str
		"ae6167656e745f6d65746164617461c4050001feff1b",                             // agent_metadata as bin
		"95cf00007f3a00000000cd1000ceffffffffcf0000000100000000cfffffffffffffffff", // addresses
		"a97373 6d5f73697a657392 00cd012c",                                         // ssm_sizes as a 2-element array
		"b0726567696f6e5f67726f75705f696473c0",                                     // region_group_ids None
		"b0726567696f6e5f6d656d5f747970657390",                                     // region_mem_types []
		"ae726567696f6e5f6d656d6265727392 92a161a162 90",                           // region_members
	} {
		w := mustHex(t, strings.ReplaceAll(want, " ", ""))
		if !bytes.Contains(b, w) {
			t.Errorf("encoding lacks %x\nencoding: %x", w, b)
		}
	}
	// A nil RegionMembers is an empty array, never nil.
	var z nixlwire.NixlAgentMetadata
	z.Reset()
	zb, _ := z.MarshalMsg(nil)
	if !bytes.HasSuffix(zb, mustHex(t, "ae726567696f6e5f6d656d6265727390")) {
		t.Errorf("nil region_members: %x", zb)
	}
}

func TestAgentMetadataOldAndUnknownKeys(t *testing.T) {
	want := oldMetadata()
	for _, extra := range []bool{false, true} {
		b := appendOldMetadata(nil, extra)
		got, err := nixlwire.DecodeAgentMetadata(b)
		if err != nil {
			t.Fatalf("extra=%v: %v", extra, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("extra=%v:\n got %+v\nwant %+v", extra, got, want)
		}
		if got.DCPSize != 1 || got.PCPSize != 1 || got.RegionMembers != nil || got.RegionNames != nil {
			t.Fatalf("defaults not applied: %+v", got)
		}
	}
}

func TestAgentMetadataReset(t *testing.T) {
	full, _ := func() ([]byte, error) { m := sampleMetadata(); return m.MarshalMsg(nil) }()
	old := appendOldMetadata(nil, false)

	var m nixlwire.NixlAgentMetadata
	m.Reset()
	if _, err := m.UnmarshalMsg(full); err != nil {
		t.Fatal(err)
	}
	// Without Reset, keys absent from the second input keep stale values:
	// that is why Reset exists.
	stale := m
	if _, err := stale.UnmarshalMsg(old); err != nil {
		t.Fatal(err)
	}
	if stale.PCPSize != 2 || stale.AttnBackendName != "FLASH_ATTN" {
		t.Fatalf("expected stale fields without Reset, got %+v", stale)
	}
	m.Reset()
	if _, err := m.UnmarshalMsg(old); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m, oldMetadata()) {
		t.Fatalf("after Reset:\n got %+v\nwant %+v", m, oldMetadata())
	}

	p := nixlwire.NixlHandshakePayload{CompatibilityHash: "x", AgentMetadataBytes: []byte{1}}
	p.Reset()
	if !reflect.DeepEqual(p, nixlwire.NixlHandshakePayload{}) {
		t.Fatalf("payload Reset: %+v", p)
	}
}

func TestAgentMetadataAddressEncodings(t *testing.T) {
	// kv_caches_base_addr as signed ints (another encoder's choice) and
	// as uint64 over MaxInt64 decode; a negative address does not.
	enc := func(addr []byte) []byte {
		b := msgp.AppendMapHeader(nil, 1)
		b = msgp.AppendString(b, "kv_caches_base_addr")
		b = msgp.AppendArrayHeader(b, 1)
		return append(b, addr...)
	}
	for s, want := range map[string]uint64{
		"d30000100000000000": 1 << 44,
		"d200010000":         65536,
		"cfffffffffffffff00": math.MaxUint64 - 0xff,
		"7f":                 127,
	} {
		m, err := nixlwire.DecodeAgentMetadata(enc(mustHex(t, s)))
		if err != nil || len(m.KVCachesBaseAddr) != 1 || m.KVCachesBaseAddr[0] != want {
			t.Errorf("address %s: %v, %v", s, m.KVCachesBaseAddr, err)
		}
	}
	for _, s := range []string{"ff", "d3ffffffffffffffff", "cb4000000000000000", "c0"} {
		_, err := nixlwire.DecodeAgentMetadata(enc(mustHex(t, s)))
		if decodeguard.ReasonOf(err) != decodeguard.ReasonDecode {
			t.Errorf("address %s: err %v, want ReasonDecode", s, err)
		}
	}
}

func TestDecodeErrorsClassified(t *testing.T) {
	key := func(k string, v []byte) []byte {
		b := msgp.AppendMapHeader(nil, 1)
		b = msgp.AppendString(b, k)
		return append(b, v...)
	}
	deep := bytes.Repeat([]byte{0x91}, 40)
	deep = append(deep, 0xc0)
	// structural cases fail for any map type; the others are field types
	// of NixlAgentMetadata only (a payload skips those keys).
	cases := []struct {
		name       string
		in         []byte
		reason     decodeguard.Reason
		structural bool
	}{
		{"empty", nil, decodeguard.ReasonDecode, true},
		{"array", mustHex(t, "93c40c6765745f6d6574615f6d73670001"), decodeguard.ReasonDecode, true},
		{"int", []byte{0x45}, decodeguard.ReasonDecode, true},
		{"raw get_meta_msg", []byte("get_meta_msg"), decodeguard.ReasonDecode, true},
		{"truncated", mustHex(t, "82b2636f6d706174"), decodeguard.ReasonDecode, true},
		{"trailing", mustHex(t, "8000"), decodeguard.ReasonDecode, true},
		{"engine_id as bin", key("engine_id", mustHex(t, "c40161")), decodeguard.ReasonDecode, false},
		{"engine_id invalid utf-8", key("engine_id", mustHex(t, "a2ff1b")), decodeguard.ReasonDecode, true},
		{"agent_metadata as str", key("agent_metadata", mustHex(t, "a161")), decodeguard.ReasonDecode, false},
		{"ssm_sizes of 3", key("ssm_sizes", mustHex(t, "93010203")), decodeguard.ReasonDecode, false},
		{"ssm_sizes nil", key("ssm_sizes", mustHex(t, "c0")), decodeguard.ReasonDecode, false},
		{"block_lens nil", key("block_lens", mustHex(t, "c0")), decodeguard.ReasonDecode, false},
		{"block_lens of str", key("block_lens", mustHex(t, "91a131")), decodeguard.ReasonDecode, false},
		{"device_id float", key("device_id", mustHex(t, "cb3ff0000000000000")), decodeguard.ReasonDecode, false},
		{"region_members of ints", key("region_members", mustHex(t, "920102")), decodeguard.ReasonDecode, false},
		{"array claims 2^32-1", key("block_lens", mustHex(t, "ddffffffff")), decodeguard.ReasonDecode, true},
		{"bin claims 2^32-1", key("agent_metadata", mustHex(t, "c6ffffffff")), decodeguard.ReasonDecode, true},
		{"map keyed by map", mustHex(t, "81800000"), decodeguard.ReasonDecode, true},
		{"int key", mustHex(t, "810102"), decodeguard.ReasonDecode, true},
		{"ext", key("x", mustHex(t, "d40100")), decodeguard.ReasonDecode, true},
		{"deep unknown key", key("zz", deep), decodeguard.ReasonOversize, true},
		{"0xc1", key("engine_id", []byte{0xc1}), decodeguard.ReasonDecode, true},
		{"escape in unknown key ok", key("\x1b[31m", []byte{0x01}), decodeguard.ReasonNone, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := nixlwire.DecodeAgentMetadata(c.in)
			checkClassified(t, err, c.reason)
			_, err = nixlwire.DecodePayload(c.in)
			if c.structural {
				checkClassified(t, err, c.reason)
			} else if err != nil {
				t.Fatalf("payload: %v", err)
			}
		})
	}
	// Payload field types.
	for name, in := range map[string][]byte{
		"hash as bin":  key("compatibility_hash", mustHex(t, "c40161")),
		"bytes as str": key("agent_metadata_bytes", mustHex(t, "a161")),
		"bytes as nil": key("agent_metadata_bytes", mustHex(t, "c0")),
		"hash as int":  key("compatibility_hash", mustHex(t, "01")),
	} {
		_, err := nixlwire.DecodePayload(in)
		if decodeguard.ReasonOf(err) != decodeguard.ReasonDecode {
			t.Errorf("%s: err %v, want ReasonDecode", name, err)
		}
	}
}

// sameMetadata reports whether a and b encode alike. The encoding is
// canonical, so this is semantic equality: it ignores what DeepEqual sees
// but the wire does not (a decoded empty list is a nil slice).
func sameMetadata(t testing.TB, a, b nixlwire.NixlAgentMetadata) bool {
	t.Helper()
	ab, err := a.MarshalMsg(nil)
	if err != nil {
		t.Fatal(err)
	}
	bb, err := b.MarshalMsg(nil)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(ab, bb)
}

// checkClassified fails unless err is a classified error of reason want
// whose text holds no control or non-ASCII bytes.
func checkClassified(t *testing.T, err error, want decodeguard.Reason) {
	t.Helper()
	if want == decodeguard.ReasonNone {
		if err != nil {
			t.Fatalf("unexpected error %v", err)
		}
		return
	}
	if got := decodeguard.ReasonOf(err); got != want {
		t.Fatalf("reason %v (err %v), want %v", got, err, want)
	}
	for _, c := range []byte(err.Error()) {
		if (c < 0x20 || c > 0x7e) && c != 0xe2 && c != 0x80 && c != 0xa6 { // "…" is allowed
			t.Fatalf("error text has raw byte %#x: %q", c, err.Error())
		}
	}
}

func TestDecodeLimits(t *testing.T) {
	m := sampleMetadata()
	b, _ := m.MarshalMsg(nil)
	if _, err := nixlwire.DecodeAgentMetadataLimits(b, &decodeguard.Limits{MaxBytes: len(b) - 1}); decodeguard.ReasonOf(err) != decodeguard.ReasonOversize {
		t.Fatalf("MaxBytes: %v", err)
	}
	if _, err := nixlwire.DecodeAgentMetadataLimits(b, &decodeguard.Limits{MaxBytes: len(b)}); err != nil {
		t.Fatalf("exact MaxBytes: %v", err)
	}
	p, _ := nixlwire.NewPayload("h", &m)
	pb, _ := p.MarshalMsg(nil)
	if _, err := nixlwire.DecodePayloadLimits(pb, &decodeguard.Limits{MaxBytes: 16}); decodeguard.ReasonOf(err) != decodeguard.ReasonOversize {
		t.Fatalf("payload MaxBytes: %v", err)
	}
}

func BenchmarkDecodeAgentMetadata(b *testing.B) {
	m := sampleMetadata()
	// A realistic size: 64 regions.
	m.KVCachesBaseAddr = make([]uint64, 64)
	m.BlockLens = make([]nixlwire.Int, 64)
	m.BlockStrides = make([]nixlwire.Int, 64)
	for i := range m.KVCachesBaseAddr {
		m.KVCachesBaseAddr[i] = 0x7f3a00000000 + uint64(i)<<30
		m.BlockLens[i] = 65536
		m.BlockStrides[i] = 65536
	}
	m.AgentMetadata = bytes.Repeat([]byte{0xab}, 4096)
	enc, err := m.MarshalMsg(nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(enc)))
	for b.Loop() {
		if _, err := nixlwire.DecodeAgentMetadata(enc); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeAgentMetadata(b *testing.B) {
	m := sampleMetadata()
	buf := make([]byte, 0, m.Msgsize())
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = m.MarshalMsg(buf[:0]); err != nil {
			b.Fatal(err)
		}
	}
}

package vllmhash

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/zmqguard/zmqguard/internal/testkit/golden"
)

// TestGoldenChainRequest rebuilds each chain-* request from its blocks and
// checks that Request yields vLLM's whole chain of hashes in one call.
func TestGoldenChainRequest(t *testing.T) {
	vecs := golden.Load(t, "hashing")
	for _, algo := range []hashAlgo{algoSHA256CBOR, algoSHA256} {
		var tokens []int64
		var want []string
		for _, v := range vecs {
			if !strings.HasPrefix(v.ID, "hash-chain-"+string(algo)+"-b") {
				continue
			}
			var x hashVector
			if err := json.Unmarshal(v.Values, &x); err != nil {
				t.Fatal(err)
			}
			if x.StartTokenIdx != len(tokens) {
				t.Fatalf("%s starts at %d, want %d", v.ID, x.StartTokenIdx, len(tokens))
			}
			tokens = append(tokens, x.TokenIDs...)
			want = append(want, x.BlockHash.Hex)
		}
		if len(want) < 2 {
			t.Fatalf("%s: %d chain vectors, want several", algo, len(want))
		}
		h, err := New(string(algo), "0")
		if err != nil {
			t.Fatal(err)
		}
		// A partial trailing block is not hashed.
		got, err := h.Request(&Request{TokenIDs: append(tokens, 1, 2, 3)}, 16)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d hashes, want %d", algo, len(got), len(want))
		}
		for i := range got {
			if got[i].String() != want[i] {
				t.Fatalf("%s block %d: %s, want %s", algo, i, got[i], want[i])
			}
		}
	}
}

func TestPickleInts(t *testing.T) {
	// The opcodes CPython's pickler picks by magnitude (pickle.dumps(n, 5)
	// less PROTO/FRAME/STOP).
	cases := []struct {
		v    int64
		want string
	}{
		{0, "K\x00"}, {255, "K\xff"}, {256, "M\x00\x01"}, {65535, "M\xff\xff"},
		{65536, "J\x00\x00\x01\x00"}, {-1, "J\xff\xff\xff\xff"}, {2147483647, "J\xff\xff\xff\x7f"},
		{-2147483648, "J\x00\x00\x00\x80"},
		{2147483648, "\x8a\x05\x00\x00\x00\x80\x00"}, {4294967296, "\x8a\x05\x00\x00\x00\x00\x01"},
		{-2147483649, "\x8a\x05\xff\xff\xff\x7f\xff"}, {-549755813888, "\x8a\x05\x00\x00\x00\x00\x80"},
		{1<<63 - 1, "\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f"},
	}
	for _, c := range cases {
		var p pickler
		p.int(c.v)
		if !bytes.Equal(p.buf, []byte(c.want)) {
			t.Errorf("pickle int %d: %x, want %x", c.v, p.buf, c.want)
		}
	}
}

func TestErrors(t *testing.T) {
	for _, a := range []hashAlgo{algoXXHash, algoXXHashCBOR, "md5", ""} {
		if _, err := New(string(a), "0"); err == nil {
			t.Errorf("New(%q) accepted", a)
		}
	}
	h, err := New(algoSHA256, "0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.block(nil, make([]int64, 40000), extraKeys{}); err != errTooLarge {
		t.Errorf("huge pickle: err %v, want errTooLarge", err)
	}
	c, _ := New(algoSHA256CBOR, "0")
	if _, err := c.block(nil, make([]int64, 40000), extraKeys{}); err != nil {
		t.Errorf("CBOR has no frame limit: %v", err)
	}
	bad := []*Request{
		{TokenIDs: make([]int64, 32), MMFeatures: []MMFeature{{"a", 8, 4}, {"b", 2, 4}}},
		{TokenIDs: make([]int64, 32), MMFeatures: []MMFeature{{"a", -1, 4}}},
		{TokenIDs: make([]int64, 32), MMFeatures: []MMFeature{{"a", 1, 0}}},
		{TokenIDs: make([]int64, 32), PromptEmbeds: make([]byte, 10), EmbedsRowBytes: 4},
		{TokenIDs: make([]int64, 32), PromptEmbeds: make([]byte, 128)},
	}
	for i, r := range bad {
		if _, err := h.Request(r, 16); err == nil {
			t.Errorf("bad request %d accepted", i)
		}
	}
	if _, err := h.Request(&Request{}, 0); err == nil {
		t.Error("block size 0 accepted")
	}
}

// TestExtraKeysSpan checks the multimodal rule on items spanning blocks.
func TestExtraKeysSpan(t *testing.T) {
	r := &Request{LoRAName: "l", CacheSalt: "s", MMFeatures: []MMFeature{{"a", 4, 20}, {"b", 26, 4}, {"c", 40, 2}}}
	got := []extraKeys{blockExtraKeys(r, 0, 16), blockExtraKeys(r, 16, 32), blockExtraKeys(r, 32, 48), blockExtraKeys(r, 48, 64)}
	want := []string{`{"LoRAName":"l","MM":[{"Identifier":"a","Offset":4}],"CacheSalt":"s","EmbedsDigest":null}`,
		`{"LoRAName":"l","MM":[{"Identifier":"a","Offset":-12},{"Identifier":"b","Offset":10}],"CacheSalt":"","EmbedsDigest":null}`,
		`{"LoRAName":"l","MM":[{"Identifier":"c","Offset":8}],"CacheSalt":"","EmbedsDigest":null}`,
		`{"LoRAName":"l","MM":null,"CacheSalt":"","EmbedsDigest":null}`}
	for i := range got {
		b, _ := json.Marshal(got[i])
		if string(b) != want[i] {
			t.Errorf("block %d: %s\nwant %s", i, b, want[i])
		}
	}
}

func BenchmarkRequest(b *testing.B) {
	tokens := make([]int64, 8192)
	for i := range tokens {
		tokens[i] = int64(i * 7919 % 128000)
	}
	for _, algo := range []hashAlgo{algoSHA256CBOR, algoSHA256} {
		h, _ := New(string(algo), "0")
		b.Run(string(algo), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(tokens) * 8))
			for b.Loop() {
				if _, err := h.Request(&Request{TokenIDs: tokens}, 64); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

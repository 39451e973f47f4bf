package handshake

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/ref/nixlwire"
)

// checkFuzzError fails unless err is a classified bad-input error other
// than a decoder panic (which would be a bug here) with a log-safe text.
func checkFuzzError(t *testing.T, what string, err error) {
	t.Helper()
	r := decodeguard.ReasonOf(err)
	if r == decodeguard.ReasonNone || r == decodeguard.ReasonDecoderPanic {
		t.Fatalf("%s: error not classified as bad input, or a decoder panic: %v", what, err)
	}
	for _, c := range []byte(strings.ReplaceAll(err.Error(), "…", "")) {
		if c < 0x20 || c > 0x7e {
			t.Fatalf("%s: error text has raw byte %#x: %q", what, c, err.Error())
		}
	}
}

func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		vecV3, vecV2,
		"93ac6765745f6d6574615f6d73670203", // message as str
		"94c40c6765745f6d6574615f6d7367000102",
		"91c40c6765745f6d6574615f6d7367",
		"90",
		"92c40c6765745f6d6574615f6d7367ff",
		"92c40c6765745f6d6574615f6d7367cfffffffffffffffff",
		"92c40c6765745f6d6574615f6d7367cb3ff0000000000000",
		"92a2ff1b01",
		"92c4031b5b3201",
		"ddffffffffc40c6765745f6d6574615f6d7367",
		strings.Repeat("91", 64) + "00",
		"45",
	} {
		f.Add(mustHex(f, s))
	}
	f.Add([]byte(nixlwire.GetMetaMsg))
	f.Add([]byte("get_meta_msg\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := parseRequest(body)
		if err != nil {
			checkFuzzError(t, "ParseRequest", err)
			if req != (Request{}) {
				t.Fatalf("error with non-zero Request %+v", req)
			}
			return
		}
		if req.Variant < V1 || req.Variant > V3 || req.PP < 0 || req.PP > nixlwire.MaxRank || req.TP < 0 || req.TP > nixlwire.MaxRank {
			t.Fatalf("accepted out-of-range request %+v", req)
		}
		if req.Variant != V3 && req.PP != 0 || req.Variant == V1 && req.TP != 0 {
			t.Fatalf("ranks set for %v: %+v", req.Variant, req)
		}
		again, err := parseRequest(appendRequest(nil, req))
		if err != nil || again != req {
			t.Fatalf("re-encoding %+v parses as %+v, %v", req, again, err)
		}
	})
}

// FuzzDecodePayload decodes its input as a nixlwire.NixlHandshakePayload and as a
// nixlwire.NixlAgentMetadata, and the payload's AgentMetadataBytes as metadata.
// Whatever decodes must re-encode to bytes that decode to the same
// encoding.
func FuzzDecodePayload(f *testing.F) {
	m := sampleMetadata()
	full, _ := m.MarshalMsg(nil)
	p, _ := nixlwire.NewPayload(strings.Repeat("a", 64), &m)
	payload, _ := p.MarshalMsg(nil)
	key := func(k string, v []byte) []byte {
		b := msgp.AppendMapHeader(nil, 1)
		b = msgp.AppendString(b, k)
		return append(b, v...)
	}
	seeds := [][]byte{
		mustHex(f, "82b2636f6d7061746962696c6974795f68617368d940"+strings.Repeat("61", 64)+
			"b46167656e745f6d657461646174615f6279746573c403010203"),
		full, payload, appendOldMetadata(nil, false), appendOldMetadata(nil, true),
		[]byte(nixlwire.GetMetaMsg), mustHex(f, vecV3), mustHex(f, "80"), mustHex(f, "45"),
		key("engine_id", mustHex(f, "c40161")),
		key("engine_id", mustHex(f, "a2ff1b")),
		key("agent_metadata_bytes", mustHex(f, "a161")),
		key("ssm_sizes", mustHex(f, "93010203")),
		key("kv_caches_base_addr", mustHex(f, "91d3ffffffffffffffff")),
		key("region_names", mustHex(f, "c0")),
		key("block_lens", mustHex(f, "ddffffffff")),
		key("zz", append(bytes.Repeat([]byte{0x91}, 64), 0xc0)),
		mustHex(f, "81800000"),
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if p, err := nixlwire.DecodePayload(b); err != nil {
			checkFuzzError(t, "DecodePayload", err)
		} else {
			enc, err := p.MarshalMsg(nil)
			if err != nil {
				t.Fatal(err)
			}
			p2, err := nixlwire.DecodePayload(enc)
			if err != nil || p2.CompatibilityHash != p.CompatibilityHash || !bytes.Equal(p2.AgentMetadataBytes, p.AgentMetadataBytes) {
				t.Fatalf("payload round trip: %+v -> %+v, %v", p, p2, err)
			}
			if _, err := p.AgentMetadata(); err != nil {
				checkFuzzError(t, "AgentMetadata", err)
			}
		}
		m, err := nixlwire.DecodeAgentMetadata(b)
		if err != nil {
			checkFuzzError(t, "DecodeAgentMetadata", err)
			return
		}
		enc, err := m.MarshalMsg(nil)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := nixlwire.DecodeAgentMetadata(enc)
		if err != nil {
			t.Fatalf("re-encoded metadata does not decode: %v", err)
		}
		enc2, _ := m2.MarshalMsg(nil)
		if !bytes.Equal(enc, enc2) {
			t.Fatalf("metadata encoding not stable:\n%x\n%x", enc, enc2)
		}
	})
}

func FuzzParseTimestamp(f *testing.F) {
	for _, s := range []string{vecTS, "ca3fc00000", "07", "ff", "cfffffffffffffffff", "cb7ff8000000000000",
		"cb7ff0000000000000", "a131", "c0", "9101", "cb40c81cd6c8b439", "cb40c81cd6c8b4395800", "d40100"} {
		f.Add(mustHex(f, s))
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		ts, err := nixlwire.ParseTimestamp(b)
		if err != nil {
			checkFuzzError(t, "ParseTimestamp", err)
			return
		}
		if again, err := nixlwire.ParseTimestamp(nixlwire.AppendTimestamp(nil, ts)); err != nil || again != ts {
			t.Fatalf("re-encoding %v parses as %v, %v", ts, again, err)
		}
	})
}

package handshake

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/internal/ref/nixlwire"
)

// FuzzPayloadMetadata: payloadMetadata (the listener's zero-copy lookup of
// agent_metadata_bytes) never panics, classifies every refusal, and agrees
// with DecodePayload on what it accepts.
func FuzzPayloadMetadata(f *testing.F) {
	good, _ := (&nixlwire.NixlHandshakePayload{CompatibilityHash: strings.Repeat("a", 64), AgentMetadataBytes: []byte{1, 2, 3}}).MarshalMsg(nil)
	f.Add(good)
	f.Add(appendErrorPayload(nil, nixlwire.ErrorReplyPrefix+"x"))
	f.Add(mustHex(f, "81b46167656e745f6d657461646174615f6279746573a162"))     // value is a str
	f.Add(mustHex(f, "82c0c0b46167656e745f6d657461646174615f6279746573c400")) // nil key first
	f.Add(mustHex(f, "81b46167656e745f6d657461646174615f6279746573c4ff"))     // truncated bin
	f.Add([]byte{0x45})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		meta, err := payloadMetadata(b)
		if err != nil {
			checkFuzzError(t, "payloadMetadata", err)
			return
		}
		// meta aliases b.
		if len(meta) > 0 && !bytes.Contains(b, meta) {
			t.Fatalf("metadata %x not inside the payload", meta)
		}
		if p, err := nixlwire.DecodePayload(b); err == nil && !bytes.Equal(p.AgentMetadataBytes, meta) {
			// DecodePayload keeps the last of duplicate keys; the lookup
			// the first. Only a payload with one such key must agree.
			if bytes.Count(b, []byte("agent_metadata_bytes")) == 1 {
				t.Fatalf("payloadMetadata %x, DecodePayload %x", meta, p.AgentMetadataBytes)
			}
		}
	})
}

// FuzzDecodeReply: the client's reply check (what a hostile or broken
// listener's frames go through) never panics and fails only with one of
// the documented kinds, with a log-safe text.
func FuzzDecodeReply(f *testing.F) {
	m := sampleMetadata()
	p, _ := nixlwire.NewPayload(testHash, &m)
	payload, _ := p.MarshalMsg(nil)
	meta, _ := m.MarshalMsg(nil)
	ts := nixlwire.AppendTimestamp(nil, 12345.678)
	f.Add(uint8(V3), uint8(2), payload, ts)
	f.Add(uint8(V2), uint8(1), payload, []byte(nil))
	f.Add(uint8(V1), uint8(1), meta, []byte(nil))
	f.Add(uint8(V3), uint8(2), appendErrorPayload(nil, nixlwire.ErrorReplyPrefix+"unknown rank"), ts)
	f.Add(uint8(V1), uint8(1), msgp.AppendString(nil, nixlwire.ErrorReplyPrefix+"\x1b[2J"), []byte(nil))
	f.Add(uint8(V3), uint8(2), []byte{0x45}, []byte{0xc0})
	f.Add(uint8(V2), uint8(1), []byte("\x80"), []byte(nil))
	f.Add(uint8(V3), uint8(3), payload, ts)
	f.Fuzz(func(t *testing.T, v, n uint8, f0, f1 []byte) {
		req := Request{Variant: Variant(1 + v%3)}
		frames := [][]byte{f0, f1, f1}[:n%4]
		r := Reply{Request: req}
		err := decodeReply(&r, frames, "tcp://127.0.0.1:5600",
			ClientOptions{ExpectedHash: testHash, ExpectedEngineID: "prefill-engine-0"})
		if err == nil {
			if r.Metadata.EngineID != "prefill-engine-0" || (req.Variant != V1 && r.CompatibilityHash != testHash) {
				t.Fatalf("accepted %+v", r)
			}
			return
		}
		kinds := 0
		for _, k := range []error{ErrBadReplyShape, ErrUndecodablePayload, ErrHashMismatch, ErrEngineIDMismatch, ErrRejected} {
			if errors.Is(err, k) {
				kinds++
			}
		}
		if kinds != 1 {
			t.Fatalf("error matches %d kinds: %v", kinds, err)
		}
		for _, c := range []byte(strings.ReplaceAll(err.Error(), "…", "")) {
			if c < 0x20 || c > 0x7e {
				t.Fatalf("error text has raw byte %#x: %q", c, err.Error())
			}
		}
	})
}

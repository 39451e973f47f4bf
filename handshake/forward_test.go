package handshake

import (
	"testing"

	"github.com/tinylib/msgp/msgp"
)

// TestReplyNewerKeys: a NixlHandshakePayload and a NixlAgentMetadata with
// keys a newer vLLM might add (hand-built, not vLLM's bytes: a
// hypothetical model_revision next to the required keys, a nested value
// under an unknown key) are read past and counted in Reply.UnknownKeys,
// never a refusal; the known fields decode as before.
func TestReplyNewerKeys(t *testing.T) {
	meta := msgp.AppendMapHeader(nil, 10)
	meta = msgp.AppendString(meta, "engine_id")
	meta = msgp.AppendString(meta, "prefill-0")
	meta = msgp.AppendString(meta, "agent_metadata")
	meta = msgp.AppendBytes(meta, []byte{1, 2})
	meta = msgp.AppendString(meta, "kv_caches_base_addr")
	meta = msgp.AppendArrayHeader(meta, 1)
	meta = msgp.AppendUint64(meta, 1<<40)
	meta = msgp.AppendString(meta, "device_id")
	meta = msgp.AppendInt64(meta, 3)
	meta = msgp.AppendString(meta, "num_blocks")
	meta = msgp.AppendInt64(meta, 1000)
	meta = msgp.AppendString(meta, "model_revision") // unknown
	meta = msgp.AppendString(meta, "a1b2c3d4")
	meta = msgp.AppendString(meta, "block_lens")
	meta = msgp.AppendArrayHeader(meta, 1)
	meta = msgp.AppendInt64(meta, 32768)
	meta = msgp.AppendString(meta, "kv_cache_layout")
	meta = msgp.AppendString(meta, "HND")
	meta = msgp.AppendString(meta, "block_size")
	meta = msgp.AppendInt64(meta, 16)
	meta = msgp.AppendString(meta, "future_regions") // unknown, nested
	meta = msgp.AppendArrayHeader(meta, 1)
	meta = msgp.AppendMapHeader(meta, 1)
	meta = msgp.AppendString(meta, "x")
	meta = msgp.AppendNil(meta)

	payload := msgp.AppendMapHeader(nil, 3)
	payload = msgp.AppendString(payload, "compatibility_hash")
	payload = msgp.AppendString(payload, "h")
	payload = msgp.AppendString(payload, "notes") // unknown
	payload = msgp.AppendString(payload, "from a newer vLLM")
	payload = msgp.AppendString(payload, "agent_metadata_bytes")
	payload = msgp.AppendBytes(payload, meta)

	r := Reply{Request: Request{Variant: V2}}
	if err := decodeReply(&r, [][]byte{payload}, "tcp://127.0.0.1:1", ClientOptions{ExpectedHash: "h"}); err != nil {
		t.Fatal(err)
	}
	if r.UnknownKeys != 3 || r.Metadata.EngineID != "prefill-0" || r.Metadata.NumBlocks != 1000 || r.Metadata.BlockSize != 16 ||
		r.Metadata.KVCacheLayout != "HND" || r.CompatibilityHash != "h" {
		t.Fatalf("reply %+v", r)
	}
	// A reply with only known keys counts none.
	r = Reply{Request: Request{Variant: V1}}
	known := msgp.AppendMapHeader(nil, 8)
	for _, k := range metadataKeys {
		known = msgp.AppendString(known, k)
		switch k {
		case "engine_id", "kv_cache_layout":
			known = msgp.AppendString(known, "e")
		case "agent_metadata":
			known = msgp.AppendBytes(known, nil)
		case "kv_caches_base_addr", "block_lens":
			known = msgp.AppendArrayHeader(known, 0)
		default:
			known = msgp.AppendInt64(known, 1)
		}
	}
	if err := decodeReply(&r, [][]byte{known}, "tcp://127.0.0.1:1", ClientOptions{}); err != nil || r.UnknownKeys != 0 {
		t.Fatalf("known keys only: unknown %d, %v", r.UnknownKeys, err)
	}
}

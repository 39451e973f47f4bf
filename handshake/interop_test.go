package handshake

import (
	"encoding/hex"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/zmqguard/zmqguard/internal/ref/nixlwire"
)

// TestPythonInterop checks the codecs against Python's msgpack (Debian's
// python3-msgpack), live: Python's encoding of the same values must equal
// Go's byte for byte, Go's encodings must decode in Python to the expected
// values, and Python's encodings (the full version-12 metadata and the
// older 8-key form, dicts built in field order) must decode in Go.
func TestPythonInterop(t *testing.T) {
	requirePython(t, "msgpack")
	ints := []int64{0, 1, 127, 128, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32, math.MaxInt64,
		-1, -32, -33, -128, -129, -32768, -32769, math.MinInt32, math.MinInt32 - 1, math.MinInt64}
	intLits := make([]string, len(ints))
	for i, v := range ints {
		intLits[i] = strconv.FormatInt(v, 10)
	}

	m := sampleMetadata()
	goFull, err := m.MarshalMsg(nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := nixlwire.NewPayload(strings.Repeat("ab", 32), &m)
	if err != nil {
		t.Fatal(err)
	}
	goPayload, _ := p.MarshalMsg(nil)
	goV3 := appendRequest(nil, Request{Variant: V3, PP: 1, TP: 300})
	goV2 := appendRequest(nil, Request{Variant: V2, TP: 7})
	goTS := nixlwire.AppendTimestamp(nil, 98765.4321)

	stdin := strings.Join([]string{
		hex.EncodeToString(goFull), hex.EncodeToString(goPayload),
		hex.EncodeToString(goV3), hex.EncodeToString(goV2), hex.EncodeToString(goTS),
	}, "\n") + "\n"

	script := `import msgpack, sys
full = ` + pySampleMetadata + `
old = ` + pyOldMetadata + `
lines = [bytes.fromhex(l.strip()) for l in sys.stdin]
go_full, go_payload, go_v3, go_v2, go_ts = lines

def check(name, cond):
    if not cond:
        print("MISMATCH " + name)
        sys.exit(0)

expected = dict(full)
expected["ssm_sizes"] = list(full["ssm_sizes"])
dec = msgpack.unpackb(go_full, raw=False)
check("full fields", dec == expected)
check("full key order", list(dec) == list(full))
check("agent_metadata is bin", type(dec["agent_metadata"]) is bytes)
check("engine_id is str", type(dec["engine_id"]) is str)
pay = msgpack.unpackb(go_payload, raw=False)
check("payload keys", list(pay) == ["compatibility_hash", "agent_metadata_bytes"])
check("payload hash", pay["compatibility_hash"] == "ab" * 32)
check("payload inner", msgpack.unpackb(pay["agent_metadata_bytes"], raw=False) == expected)
check("v3", msgpack.unpackb(go_v3, raw=False) == [b"get_meta_msg", 1, 300])
check("v2", msgpack.unpackb(go_v2, raw=False) == [b"get_meta_msg", 7])
ts = msgpack.unpackb(go_ts)
check("ts", type(ts) is float and ts == 98765.4321)

print("OK")
print(msgpack.packb(full).hex())
print(msgpack.packb(old).hex())
print(msgpack.packb({"compatibility_hash": "a" * 64, "agent_metadata_bytes": b"\x01\x02\x03"}).hex())
print(msgpack.packb((b"get_meta_msg", 0, 1)).hex())
print(msgpack.packb((b"get_meta_msg", 1)).hex())
print(msgpack.packb(12345.678).hex())
print(" ".join(msgpack.packb(v).hex() for v in [` + strings.Join(intLits, ", ") + `]))
`
	out := strings.Split(strings.TrimSpace(string(runPython(t, script, []byte(stdin)))), "\n")
	if out[0] != "OK" {
		t.Fatalf("python decoding Go's encodings: %s", out[0])
	}
	if len(out) != 8 {
		t.Fatalf("python printed %d lines: %q", len(out), out)
	}
	pyFull, pyOld := mustHex(t, out[1]), mustHex(t, out[2])

	if out[1] != hex.EncodeToString(goFull) {
		t.Errorf("full metadata differs from Python's encoding:\n  go %x\n  py %s", goFull, out[1])
	}
	got, err := nixlwire.DecodeAgentMetadata(pyFull)
	if err != nil {
		t.Fatalf("decoding Python's full metadata: %v", err)
	}
	if !sameMetadata(t, got, m) || got.RegionGroupIDs != nil || got.RegionMemTypes == nil {
		t.Errorf("Python's full metadata decoded as %+v", got)
	}
	gotOld, err := nixlwire.DecodeAgentMetadata(pyOld)
	if err != nil {
		t.Fatalf("decoding Python's old metadata: %v", err)
	}
	if !reflect.DeepEqual(gotOld, oldMetadata()) {
		t.Errorf("Python's old metadata decoded as %+v, want %+v", gotOld, oldMetadata())
	}
	if hex.EncodeToString(appendOldMetadata(nil, false)) != out[2] {
		t.Errorf("hand-built old metadata differs from Python's:\n  go %x\n  py %s", appendOldMetadata(nil, false), out[2])
	}

	vectors := []struct {
		name string
		py   string
		want string
	}{
		{"payload vector", out[3], "82b2636f6d7061746962696c6974795f68617368d940" + strings.Repeat("61", 64) +
			"b46167656e745f6d657461646174615f6279746573c403010203"},
		{"V3 vector", out[4], vecV3},
		{"V2 vector", out[5], vecV2},
		{"timestamp vector", out[6], vecTS},
	}
	for _, v := range vectors {
		if v.py != v.want {
			t.Errorf("%s: python %s, docs/protocol.md %s", v.name, v.py, v.want)
		}
	}
	pyInts := strings.Fields(out[7])
	if len(pyInts) != len(ints) {
		t.Fatalf("python printed %d ints", len(pyInts))
	}
	for i, v := range ints {
		b, _ := nixlwire.Int(v).MarshalMsg(nil)
		if hex.EncodeToString(b) != pyInts[i] {
			t.Errorf("nixlwire.Int(%d) = %x, python %s", v, b, pyInts[i])
		}
	}
}

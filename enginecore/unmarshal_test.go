package enginecore

import (
	"bytes"
	"encoding/hex"
	"testing"

	"github.com/zmqguard/zmqguard/decodeguard"
)

// Coordinator message vectors (the coordinator package's tests check them
// against vLLM's encoding): stats with kv_cache_usage, and a wave_complete.
const (
	vecStatsKVHex      = "94019085b06e756d5f72756e6e696e675f7265717303b06e756d5f77616974696e675f7265717305ac737465705f636f756e7465722aac63757272656e745f7761766507ae6b765f63616368655f7573616765cb3fd0000000000000cb40c81cd6c8b43958"
	vecWaveCompleteHex = "970090c0cb40c81cd6c8b43958c0c007"
)

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzHeaderUnmarshalBare (moved here from the coordinator's
// FuzzDecodeEngineCoreOutputs when UnmarshalMsg became unexported): the
// bare decoder, without the pre-scan or the recover, must not panic, its
// errors must be classified, and on every frame DecodeHeader accepts it
// must agree and consume everything.
func FuzzHeaderUnmarshalBare(f *testing.F) {
	for _, s := range []string{vecStatsKVHex, vecWaveCompleteHex, "45", "", "90", "9100", "c1", "dcffff"} {
		b, _ := hex.DecodeString(s)
		f.Add(b)
	}
	f.Add(append(bytes.Repeat([]byte{0x91}, 20000), 0x01))
	f.Fuzz(func(t *testing.T, b []byte) {
		var bare Header
		rest, bareErr := bare.unmarshalMsg(b)
		if bareErr != nil && !decodeguard.IsBadInput(bareErr) {
			t.Fatalf("unmarshalMsg: unclassified error %v", bareErr)
		}
		if bareErr == nil && len(rest) > len(b) {
			t.Fatal("unmarshalMsg returned more bytes than it got")
		}
		var m Header
		if err := DecodeHeader(b, nil, &m); err != nil {
			return
		}
		if bareErr != nil || len(rest) != 0 || !sameHeader(bare, m) {
			t.Fatalf("guarded and bare decoders disagree: %+v / %+v (%v, %d left)", m, bare, bareErr, len(rest))
		}
		if m.Validate() != nil {
			t.Fatal("accepted a message that does not validate")
		}
	})
}

// TestUnmarshalWithoutScan: unmarshalMsg on its own (no Scan) still fails
// cleanly on short input and header claims, and returns leftover bytes,
// msgp style.
func TestUnmarshalWithoutScan(t *testing.T) {
	for _, in := range []string{"", "dd", "ddffffffff", "980190", "9801dcffff", "93009084", "930090de", "9300908fa1", "98019100"} {
		var m Header
		if _, err := m.unmarshalMsg(mustHex(t, in)); err == nil {
			t.Fatalf("%s: accepted", in)
		} else if decodeguard.ReasonOf(err) == decodeguard.ReasonNone {
			t.Fatalf("%s: unclassified error %v", in, err)
		}
	}
	b := append(mustHex(t, vecWaveCompleteHex), 0xc0)
	var m Header
	rest, err := m.unmarshalMsg(b)
	if err != nil || !bytes.Equal(rest, []byte{0xc0}) {
		t.Fatalf("rest %x err %v", rest, err)
	}
}

// BenchmarkDecodeStatsBare is unmarshalMsg alone (no pre-scan, no
// validation), to show what the guard costs (compare the coordinator's
// BenchmarkDecodeStats).
func BenchmarkDecodeStatsBare(b *testing.B) {
	frame := mustHex(b, vecStatsKVHex)
	var m Header
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if _, err := m.unmarshalMsg(frame); err != nil {
			b.Fatal(err)
		}
	}
}

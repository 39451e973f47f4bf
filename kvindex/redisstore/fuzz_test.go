package redisstore

import (
	"strconv"
	"testing"

	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
)

// FuzzParseReplies: the Holders script's strings (epochs, then one per
// key), and a position's value, are parsed without panics or unbounded
// allocation, whatever they hold, and well-formed ones are read back
// exactly.
func FuzzParseReplies(f *testing.F) {
	f.Add("1,0,2,3", "1:77:0:0,0,2:78:1:3,2")
	f.Add("", "")
	f.Add("16777217,1", "x:y:z,1")
	f.Add("1,0", "1:2:3:4,0,1:2:3")
	f.Add("7:18446744073709551615", "1:2:3:4,0")
	f.Add("1,0,2,3", "1:77:0:0,0:12,2:78:1:3,2:9007199254740993")
	f.Fuzz(func(t *testing.T, ep, holders string) {
		epochs, err := parseEpochs(ep, nil)
		if err == nil && len(epochs) > len(ep)+2 {
			t.Fatalf("%d epochs", len(epochs))
		}
		hs, err := parseHolders(holders, epochs, nil)
		if err == nil && len(hs) > len(holders) {
			t.Fatalf("%d holders from %d bytes", len(hs), len(holders))
		}
		if _, err := parseMapKey(holders); err == nil && holders == "" {
			t.Fatal("empty map value accepted")
		}
		if p, err := parsePosition(ep); err == nil {
			if q, err := parsePosition(strconv.FormatUint(p.Seq, 10) + ":" + strconv.FormatUint(p.Digest, 10)); err != nil || q != p {
				t.Fatalf("position %q read as %+v, its canonical form as %+v %v", ep, p, q, err)
			}
		}
	})
}

func TestParseReplies(t *testing.T) {
	epochs, err := parseEpochs("1,0,2,4,3,7", nil)
	if err != nil || len(epochs) != 4 || epochs[1] != "0" || epochs[3] != "7" {
		t.Fatalf("epochs %q %v", epochs, err)
	}
	want := []kvindex.Holder{{Engine: 1, Medium: 0, Trusted: true}, {Engine: 3, Medium: 2, Trusted: false}, {Engine: 9, Medium: 1, Trusted: false}}
	// The value is "epoch:seq"; the seq is not part of the trust.
	for _, in := range []string{"1:77:0:0,0,3:78:2:1,6,9:1:1:1,0", "1:77:0:0,0:5,3:78:2:1,6:7,9:1:1:1,0:1", "1:77:0:0,0:5,3:78:2:1,6:,9:1:1:1,0:"} {
		hs, err := parseHolders(in, epochs, nil)
		if err != nil || len(hs) != 3 || hs[0] != want[0] || hs[1] != want[1] || hs[2] != want[2] {
			t.Fatalf("holders of %q: %+v %v", in, hs, err)
		}
	}
	for _, bad := range []string{"x:1:1:1,0", "1:1:x:1,0", "1:1:70000:1,0"} {
		if _, err := parseHolders(bad, epochs, nil); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if k, err := parseMapKey("18446744073709551615|0:0|1:2"); err != nil || k != kvindex.Key(1<<64-1) {
		t.Fatalf("map key %d %v", k, err)
	}
	if _, err := parseMapKey("|0:0"); err == nil {
		t.Fatal("map value without a key accepted")
	}
	if p, err := parsePosition("7:18446744073709551615"); err != nil || p != (kvevents.Position{Seq: 7, Digest: 1<<64 - 1}) {
		t.Fatalf("position %+v %v", p, err)
	}
	for _, bad := range []string{"", "7", "7:", ":7", "7:x", "-1:2", "1:2:3", "18446744073709551616:0"} {
		if _, err := parsePosition(bad); err == nil {
			t.Errorf("position %q accepted", bad)
		}
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"regexp"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/zmqguard/zmqguard/decodeguard"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun subscribes to its own demo coordinator until it has seen a wave
// publication (engine 0 ends a wave a second after it starts; the engines
// are woken) and a stats publication, bounded at 60 s.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, []string{"-demo", "-waves", "1", "-for", "60s"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[1-9][0-9]* stats publications, [1-9][0-9]* wave publications, 0 malformed`).MatchString(out.String()) {
		t.Fatalf("unexpected summary: %q", out.String())
	}
}

// TestParsePublication: the example's reader takes vLLM's two publication
// shapes (bytes as msgspec writes them) and refuses hostile ones with a
// classified error, before allocating what a header claims.
func TestParsePublication(t *testing.T) {
	p, err := parsePublication(unhex(t, "939292050392000107c3")) // ([[5,3],[0,1]], 7, True)
	if err != nil || !p.hasCounts || len(p.counts) != 2 || p.counts[0] != [2]int64{5, 3} || p.counts[1] != [2]int64{0, 1} || p.wave != 7 || !p.running {
		t.Fatalf("stats publication: %+v, %v", p, err)
	}
	p, err = parsePublication(unhex(t, "93c007c2")) // (None, 7, False)
	if err != nil || p.hasCounts || p.wave != 7 || p.running {
		t.Fatalf("wave publication: %+v, %v", p, err)
	}
	for _, h := range []string{
		"45",                    // a bare int
		"93ddffffffff07c3",      // counts claiming 2^32-1 engines
		"9391920503" + "07",     // truncated
		"93c007c2" + "00",       // trailing byte
		"939192ff0307c3",        // negative waiting
		"939193050301" + "07c3", // kv_cache_usage not a float
	} {
		if _, err := parsePublication(unhex(t, h)); !decodeguard.IsBadInput(err) {
			t.Errorf("%s: %v, want a classified error", h, err)
		}
	}
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzParsePublication: any frame is parsed or refused with a classified
// error, never a panic, and a parsed one holds only what its bytes could.
func FuzzParsePublication(f *testing.F) {
	for _, h := range []string{"939292050392000107c3", "93c007c2", "93ddffffffff07c3", "939193050301cb3fe000000000000007c2"} {
		b, _ := hex.DecodeString(h)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := parsePublication(b)
		if err != nil {
			if !decodeguard.IsBadInput(err) {
				t.Fatalf("unclassified error: %v", err)
			}
			return
		}
		if len(p.counts) > len(b) || p.wave < 0 || (!p.hasCounts && p.counts != nil) {
			t.Fatalf("parsed %x as %+v", b, p)
		}
	})
}

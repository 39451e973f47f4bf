package dpwire_test

import (
	"encoding/hex"
	"fmt"
	"testing"

	"go.uber.org/goleak"

	"github.com/zmqguard/zmqguard/internal/dpwire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The byte vectors are those the enginecore and coordinator tests check
// against vLLM's own encoding (msgspec/msgpack).
func TestVectors(t *testing.T) {
	stats := dpwire.AppendStatsHeader(nil, 2)
	stats = dpwire.AppendLoad(stats, 5, 3, 0, false)
	stats = dpwire.AppendLoad(stats, 0, 1, 0, false)
	stats = dpwire.AppendStatsTrailer(stats, 7, true)
	for _, c := range []struct {
		name string
		got  []byte
		want string
	}{
		{"stats ([[5,3],[0,1]], 7, True)", stats, "939292050392000107c3"},
		{"wave (nil, 7, False)", dpwire.AppendWavePublish(nil, 7, false), "93c007c2"},
		{"START_DP_WAVE (7, 2)", dpwire.AppendStartDPWaveIndex(nil, 7, 2, true), "920702"},
		{"START_DP_WAVE (7, None)", dpwire.AppendStartDPWaveIndex(nil, 7, 0, false), "9207c0"},
		{"int -1", dpwire.AppendInt(nil, -1), "ff"},
		{"int 300", dpwire.AppendInt(nil, 300), "cd012c"},
	} {
		if h := hex.EncodeToString(c.got); h != c.want {
			t.Errorf("%s: %s, want %s", c.name, h, c.want)
		}
	}
}

func ExampleAppendWavePublish() {
	fmt.Printf("%x\n", dpwire.AppendWavePublish(nil, 7, false))
	// Output: 93c007c2
}

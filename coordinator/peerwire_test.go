package coordinator

import (
	"encoding/hex"
	"testing"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/ref/dpwire"
)

func TestParseStartDPWave(t *testing.T) {
	for _, c := range []struct {
		hex  string
		want dpwire.StartDPWave
	}{
		{"920702", dpwire.StartDPWave{Wave: 7, HasExclude: true, Exclude: 2}}, // docs/protocol.md's (7, 2)
		{"9207c0", dpwire.StartDPWave{Wave: 7}},
		{"92cf0000010000000000c0", dpwire.StartDPWave{Wave: 1 << 40}},
		{"9200cd0100", dpwire.StartDPWave{HasExclude: true, Exclude: 256}},
	} {
		got, err := dpwire.ParseStartDPWave(unhex(t, c.hex))
		if err != nil || got != c.want {
			t.Errorf("%s: %+v %v, want %+v", c.hex, got, err, c.want)
		}
	}
	for _, c := range []struct {
		hex    string
		reason decodeguard.Reason
	}{
		{"", decodeguard.ReasonDecode},
		{"45", decodeguard.ReasonDecode},
		{"910700", decodeguard.ReasonDecode},                   // trailing
		{"9107", decodeguard.ReasonDecode},                     // arity 1
		{"93070200", decodeguard.ReasonDecode},                 // arity 3
		{"92a17802", decodeguard.ReasonDecode},                 // wave a str
		{"9207c3", decodeguard.ReasonDecode},                   // exclude a bool
		{"92ff02", decodeguard.ReasonValidate},                 // negative wave
		{"9207ff", decodeguard.ReasonValidate},                 // negative exclude
		{"92cfffffffffffffffff02", decodeguard.ReasonValidate}, // wave beyond int64
		{"92cf7fffffffffffffffc0", decodeguard.ReasonValidate}, // wave MaxInt64 > dpwire.MaxWave
		{"a3e08080", decodeguard.ReasonDecode},
		{"9291919191910102", decodeguard.ReasonOversize},
	} {
		_, err := dpwire.ParseStartDPWave(unhex(t, c.hex))
		if decodeguard.ReasonOf(err) != c.reason {
			t.Errorf("%s: %v, want %v", c.hex, err, c.reason)
		}
		if err != nil {
			checkSafeText(t, err.Error())
		}
	}
	// What the coordinator sends parses back.
	for _, sw := range []dpwire.StartDPWave{{Wave: 3}, {Wave: dpwire.MaxWave, HasExclude: true, Exclude: dpwire.MaxEngines - 1}} {
		a := stateActions{StartWave: sw}
		if got, err := dpwire.ParseStartDPWave(a.AppendStartDPWave(nil)); err != nil || got != sw {
			t.Errorf("round trip %+v: %+v %v", sw, got, err)
		}
	}
}

// FuzzParseStartDPWave checks the engine-side parser: no panic, classified
// errors with safe text, and what it accepts re-encodes to the same bytes
// when the input used minimal encodings.
func FuzzParseStartDPWave(f *testing.F) {
	for _, s := range []string{"920702", "9207c0", "92cf0000010000000000c0", "", "45", "92ff02", "9207ff", "92d00702", "9291919101c0"} {
		b, _ := hex.DecodeString(s)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sw, err := dpwire.ParseStartDPWave(b)
		if err != nil {
			if !decodeguard.IsBadInput(err) {
				t.Fatalf("unclassified error %v", err)
			}
			checkSafeText(t, err.Error())
			return
		}
		if sw.Wave < 0 || sw.Wave > dpwire.MaxWave || sw.Exclude < 0 || (!sw.HasExclude && sw.Exclude != 0) {
			t.Fatalf("accepted %+v", sw)
		}
		a := stateActions{StartWave: sw}
		again, err := dpwire.ParseStartDPWave(a.AppendStartDPWave(nil))
		if err != nil || again != sw {
			t.Fatalf("round trip %+v: %+v %v", sw, again, err)
		}
	})
}

package coordinator

import (
	"bytes"
	"encoding/hex"
	"math"
	"testing"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/internal/ref/dpwire"
)

// fuzzSeedsECO are seeds added with f.Add besides the committed corpus in
// testdata/fuzz/FuzzDecodeEngineCoreOutputs.
var fuzzSeedsECO = []string{
	vecMinimalStats, vecWaveComplete, vecStartWave, vecStatsKV,
	"45", "", "90", "9100", "c1", "dcffff", "ddffffffff01",
	"930090de0000", "930090df7fffffff", "9a0090c0cb40c81cd6c8b43958c0c0c0c0a178c0",
	"960090c0cb3ff0000000000000c091a3e08080",
}

var fuzzSeedsFront = []string{
	vecScale4, vecWakeNil7, vecWake2_7, vecWakeIdentity, "01", "00", "0174", "a3e08080", "818001",
	"92c402ffff07", "92cfffffffffffffffff07", "92c0cf7fffffffffffffff", "93c00700", "92c307", "c0", "",
}

func sameFloat(a, b float64) bool {
	return a == b || (math.IsNaN(a) && math.IsNaN(b))
}

// sameView compares two decoded messages, NaN timestamps included (the
// timestamp is not validated).
func sameView(a, b enginecore.Header) bool {
	if !sameFloat(a.Timestamp, b.Timestamp) {
		return false
	}
	a.Timestamp, b.Timestamp = 0, 0
	return a == b
}

func FuzzDecodeEngineCoreOutputs(f *testing.F) {
	for _, s := range fuzzSeedsECO {
		b, err := hex.DecodeString(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(append(bytes.Repeat([]byte{0x91}, 20000), 0x01))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m enginecore.Header
		err := enginecore.DecodeHeader(b, nil, &m)
		if err != nil {
			if !decodeguard.IsBadInput(err) {
				t.Fatalf("unclassified error %v", err)
			}
			if decodeguard.ReasonOf(err) == decodeguard.ReasonDecoderPanic {
				t.Fatalf("decoder panicked: %v", err)
			}
			checkSafeText(t, err.Error())
			return
		}
		// (The bare decoder's agreement on this input is
		// enginecore's FuzzHeaderUnmarshalBare.)
		if m.Validate() != nil {
			t.Fatal("accepted a message that does not validate")
		}
		// Coordinator messages re-encode to the same view.
		if m.OutputsLen == 0 && !m.HasUtilityOutput && !m.HasFinishedRequests {
			enc := dpwire.AppendHeader(nil, &m)
			var again enginecore.Header
			if err := enginecore.DecodeHeader(enc, nil, &again); err != nil {
				t.Fatalf("re-encoded %x does not decode: %v", enc, err)
			}
			m.Fields, again.Fields = 0, 0
			if !sameView(m, again) {
				t.Fatalf("round trip changed the message:\n was %+v\n now %+v", m, again)
			}
		}
		// The state machine takes it or drops it with a classified error.
		s, _ := newStateMachine(4, stateConfig{})
		s.OnBackSubscribe()
		s.OnBackSubscribe()
		s.OnBackSubscribe()
		s.OnBackSubscribe()
		a, err := s.OnEngineOutput(&m)
		if err != nil && (!decodeguard.IsBadInput(err) || !a.None()) {
			t.Fatalf("OnEngineOutput: %+v %v", a, err)
		}
	})
}

func FuzzParseFrontMessage(f *testing.F) {
	for _, s := range fuzzSeedsFront {
		b, err := hex.DecodeString(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := dpwire.ParseFrontMessage(b)
		if err != nil {
			if !decodeguard.IsBadInput(err) {
				t.Fatalf("unclassified error %v", err)
			}
			checkSafeText(t, err.Error())
			return
		}
		var re []byte
		switch m.Kind {
		case dpwire.FrontSubscribe, dpwire.FrontUnsubscribe:
			if (m.Kind == dpwire.FrontSubscribe) != (b[0] == 1) || b[0] > 1 || !bytes.Equal(m.Topic, b[1:]) {
				t.Fatalf("subscription %x parsed as %+v", b, m)
			}
		case dpwire.FrontScale:
			if m.Engines < 1 || m.Engines > dpwire.MaxEngines {
				t.Fatalf("engine count %d accepted", m.Engines)
			}
			re = dpwire.AppendScaleElasticEP(nil, m.Engines)
		case dpwire.FrontWake:
			if m.Wave < 0 || m.Wave > dpwire.MaxWave || m.Exclude < 0 || (!m.HasExclude && (m.Exclude != 0 || m.ExcludeIdentity)) {
				t.Fatalf("wake %+v accepted", m)
			}
			switch {
			case m.ExcludeIdentity:
				if m.Exclude >= dpwire.MaxEngines {
					t.Fatalf("identity %d beyond 2 bytes", m.Exclude)
				}
				re = dpwire.AppendWakeIdentity(nil, uint16(m.Exclude), int(m.Wave))
			case m.HasExclude:
				ex := int(m.Exclude)
				re = dpwire.AppendWake(nil, &ex, int(m.Wave))
			default:
				re = dpwire.AppendWake(nil, nil, int(m.Wave))
			}
		default:
			t.Fatalf("kind %v", m.Kind)
		}
		if re != nil {
			again, err := dpwire.ParseFrontMessage(re)
			if err != nil || again.Kind != m.Kind || again.Engines != m.Engines || again.Wave != m.Wave ||
				again.HasExclude != m.HasExclude || again.Exclude != m.Exclude || again.ExcludeIdentity != m.ExcludeIdentity {
				t.Fatalf("round trip of %+v via %x: %+v %v", m, re, again, err)
			}
		}
		s, _ := newStateMachine(3, stateConfig{})
		s.OnBackSubscribe()
		s.OnBackSubscribe()
		s.OnBackSubscribe()
		a, err := s.OnFrontMessage(m)
		if err != nil && (!decodeguard.IsBadInput(err) || !a.None()) {
			t.Fatalf("OnFrontMessage: %+v %v", a, err)
		}
		if err == nil && a.SendStartWave && a.StartWave.HasExclude && a.StartWave.Exclude >= 3 {
			t.Fatalf("exclusion beyond the engines: %+v", a)
		}
	})
}

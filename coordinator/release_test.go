package coordinator

import (
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/internal/ref/dpwire"
	"github.com/zmqguard/zmqguard/vllm"
)

// Drift guard: the byte vectors of the project's release notes
// (docs/vllm-releases.md) and of docs/protocol.md, per release profile. A
// change to a profile's rules or to the encoders that moves these bytes
// fails here; update docs/vllm-releases.md in the same change.
var releaseVectors = []struct {
	release vllm.Release
	// stats is ([[5,3,0.25],[0,1,0.0]], 7, True) in the release's layout.
	stats string
	// wake is what a wake (nil, 7) in wave 7 while paused does:
	// START_DP_WAVE's body, and the publication it triggers ("" = none).
	wakeStart, wakePub string
}{
	{vllm.Releases()[0], "939292050392000107c3", "9207c0", "93c007c3"},
	{vllm.MustParse("0.26"), "939292050392000107c3", "9207c0", "93c007c3"},
	{vllm.MustParse("main-pre-50620"), "9392930503cb3fd0000000000000930001cb000000000000000007c3", "9207c0", "93c007c3"},
	{vllm.MustParse("main-pre-51481"), "9392930503cb3fd0000000000000930001cb000000000000000007c3", "9207c0", "93c007c3"},
	{vllm.Latest(), "9392930503cb3fd0000000000000930001cb000000000000000007c3", "9207c0", ""},
}

func TestReleaseVectors(t *testing.T) {
	if len(releaseVectors) != len(vllm.Releases()) {
		t.Fatalf("%d vector rows for %d profiles: add the new profile's row", len(releaseVectors), len(vllm.Releases()))
	}
	for _, v := range releaseVectors {
		t.Run(v.release.String(), func(t *testing.T) {
			s := newStarted(t, 2, stateConfig{Release: v.release})
			setWave(t, s, 7, true)
			a, b := statsMsg(0, 5, 3, 7, 1), statsMsg(1, 0, 1, 7, 1)
			a.Stats.KVCacheUsage = 0.25
			for _, m := range []*enginecore.Header{a, b} {
				if _, err := s.OnEngineOutput(m); err != nil {
					t.Fatal(err)
				}
			}
			if got := hex.EncodeToString(s.AppendStatsPublish(nil)); got != v.stats {
				t.Fatalf("stats publication %s, want %s", got, v.stats)
			}

			p := newStarted(t, 2, stateConfig{Release: v.release})
			setWave(t, p, 7, false)
			act, err := p.OnFrontMessage(dpwire.FrontMsg{Kind: dpwire.FrontWake, Wave: 7})
			if err != nil || !act.SendStartWave {
				t.Fatalf("wake: %+v %v", act, err)
			}
			if got := hex.EncodeToString(act.AppendStartDPWave(nil)); got != v.wakeStart {
				t.Fatalf("START_DP_WAVE %s, want %s", got, v.wakeStart)
			}
			pub := ""
			if act.PublishWave {
				pub = hex.EncodeToString(act.AppendWavePublish(nil))
			}
			if pub != v.wakePub {
				t.Fatalf("wake publication %q, want %q", pub, v.wakePub)
			}
		})
	}
}

// TestLatestWakeNeverLatchesRunning is the scenario of vLLM RFC #51476
// under the latest profile: wakes while the engines are paused (and
// discard START_DP_WAVE) never make a publication claim running; DP rank
// 0's start_wave does; a pause (wave_complete) after the wave leaves
// running false, and later wakes still broadcast START_DP_WAVE.
func TestLatestWakeNeverLatchesRunning(t *testing.T) {
	s := newStarted(t, 2, stateConfig{})
	setWave(t, s, 4, false)
	now := time.Unix(1000, 0)
	for i := range 5 {
		a, err := s.OnFrontMessage(dpwire.FrontMsg{Kind: dpwire.FrontWake, Wave: 4, HasExclude: true, Exclude: 1})
		if err != nil || !a.SendStartWave || a.StartWave != (dpwire.StartDPWave{Wave: 4, HasExclude: true, Exclude: 1}) {
			t.Fatalf("wake %d: %+v %v", i, a, err)
		}
		if a.PublishWave || a.Running || s.Running() {
			t.Fatalf("wake %d claims running: %+v", i, a)
		}
		now = now.Add(10 * time.Second)
		if !s.Tick(now).PublishStats {
			t.Fatal("no periodic publication")
		}
		if got := hex.EncodeToString(s.AppendStatsPublish(nil)); got[len(got)-2:] != "c2" {
			t.Fatalf("publication after wake %d claims running: %s", i, got)
		}
	}
	// Rank 0 reports the paused->running edge.
	a, err := s.OnEngineOutput(startWaveMsg(0, 4))
	if err != nil || !a.PublishWave || !a.Running || !s.Running() ||
		a.StartWave != (dpwire.StartDPWave{Wave: 4, HasExclude: true, Exclude: 0}) {
		t.Fatalf("start_wave: %+v %v", a, err)
	}
	if got := hex.EncodeToString(a.AppendWavePublish(nil)); got != "93c004c3" {
		t.Fatalf("publication %s", got)
	}
	// The wave ends; running stays false afterwards.
	a, err = s.OnEngineOutput(waveCompleteMsg(0, 4))
	if err != nil || !a.PublishWave || a.Running || s.Running() || s.Wave() != 5 {
		t.Fatalf("wave_complete: %+v %v", a, err)
	}
	if a, _ := s.OnFrontMessage(dpwire.FrontMsg{Kind: dpwire.FrontWake, Wave: 5}); !a.SendStartWave || s.Running() {
		t.Fatalf("wake after the pause: %+v", a)
	}
}

// TestScaleUpLatest: the newest vLLM coordinator no longer marks the
// engines paused when it grows.
func TestScaleUpLatest(t *testing.T) {
	s := newStarted(t, 2, stateConfig{})
	setWave(t, s, 3, true)
	a, err := s.OnFrontMessage(dpwire.FrontMsg{Kind: dpwire.FrontScale, Engines: 4})
	if err != nil || a.PublishWave || !a.Running || !s.Running() || s.Engines() != 4 {
		t.Fatalf("grow: %+v %v", a, err)
	}
	want := "9394" + "930000cb0000000000000000" + "930000cb0000000000000000" + "930000cb0000000000000000" +
		"930000cb0000000000000000" + "03c3"
	if got := hex.EncodeToString(s.AppendStatsPublish(nil)); got != want {
		t.Fatalf("publication %s, want %s", got, want)
	}
}

// TestReleaseVectorsDocumented is the drift guard between the code and the
// project's release notes: every profile's vectors above must be the ones
// docs/vllm-releases.md shows on that profile's row.
func TestReleaseVectorsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/vllm-releases.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "## Byte vectors")
	if !ok {
		t.Fatal("docs/vllm-releases.md has no byte-vector section")
	}
	for _, v := range releaseVectors {
		var row string
		for _, line := range strings.Split(section, "\n") {
			if strings.HasPrefix(line, "| ") && strings.Contains(strings.SplitN(line, "|", 3)[1], "`"+v.release.String()+"`") {
				row = line
				break
			}
		}
		if row == "" {
			t.Errorf("%s: no row in docs/vllm-releases.md", v.release)
			continue
		}
		pub := "publishes nothing"
		if v.wakePub != "" {
			pub = "publishes `" + v.wakePub + "`"
		}
		for _, want := range []string{"`" + v.stats + "`", "`" + v.wakeStart + "`", pub} {
			if !strings.Contains(row, want) {
				t.Errorf("%s: docs/vllm-releases.md row lacks %s: %s", v.release, want, row)
			}
		}
	}
}

package vllm

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParse(t *testing.T) {
	for in, want := range map[string]string{
		"": "latest", "latest": "latest", " latest ": "latest", "0.25": "0.25", "v0.26": "0.26",
		"0.26.1": "0.26", "v0.25.0": "0.25", "main-pre-51481": "main-pre-51481", "main-pre-50620": "main-pre-50620",
	} {
		r, err := Parse(in)
		if err != nil || r.String() != want {
			t.Errorf("Parse(%q) = %v, %v; want %s", in, r, err, want)
		}
	}
	for _, in := range []string{"0.24", "1", "0.26.1.2", "latest2", "0.2x"} {
		if _, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) accepted", in)
		}
	}
	if r := MustParse("latest"); r != Latest() || r != (Release{}) {
		t.Fatal("MustParse(latest) is not Latest")
	}
	oldest := Releases()[0]
	if oldest.String() != "0.25" || oldest == Latest() {
		t.Fatalf("oldest = %v", oldest)
	}
	if got := Releases(); len(got) != len(names()) || got[len(got)-1] != Latest() || got[0] != MustParse("0.25") {
		t.Fatalf("Releases() = %v", got)
	}
	for i, r := range Releases() {
		if r.String() != names()[i] {
			t.Errorf("Releases()[%d] = %v, names()[%d] = %s", i, r, i, names()[i])
		}
	}
}

// TestRules pins every profile's rules to the vLLM pull requests they come
// from (see the package doc and docs/vllm-releases.md).
func TestRules(t *testing.T) {
	want := map[string]Rules{
		"0.25": {WakeSetsRunning: true, ScaleUpPauses: true, NixlConnectorVersion: 5, NixlHashCrossLayersBlocks: true},
		"0.26": {WakeSetsRunning: true, ScaleUpPauses: true, NixlConnectorVersion: 5, NixlHashCrossLayersBlocks: true,
			KVEventsMapForm: true, KVReplayTopicFrame: true},
		"main-pre-50620": {StatsKVCacheUsage: true, WakeSetsRunning: true, NixlConnectorVersion: 6,
			NixlHashCrossLayersBlocks: true, KVEventsMapForm: true, KVReplayTopicFrame: true,
			NixlHashSpeculativeConfig: true},
		"main-pre-51481": {StatsKVCacheUsage: true, WakeSetsRunning: true, NixlConnectorVersion: 7,
			NixlHashCrossLayersBlocks: true, KVEventsMapForm: true, KVReplayTopicFrame: true,
			NixlHashSpeculativeConfig: true, NixlHashTransferMode: true},
		"latest": {StatsKVCacheUsage: true, NixlConnectorVersion: 7, NixlHashCrossLayersBlocks: true,
			KVEventsMapForm: true, KVReplayTopicFrame: true, NixlHashSpeculativeConfig: true, NixlHashTransferMode: true},
	}
	for _, r := range Releases() {
		if got := r.Rules(); got != want[r.String()] {
			t.Errorf("%s: rules %+v, want %+v", r, got, want[r.String()])
		}
	}
	if Latest().Rules() != want["latest"] || (Release{}).Rules() != want["latest"] {
		t.Fatal("the zero Release is not latest")
	}
	if (Release{name: "bogus"}).Rules() != want["latest"] {
		t.Fatal("an unknown name does not fall back to latest")
	}
}

// Package vllm names the vLLM release a zmqguard reference talks to.
//
// vLLM's ZeroMQ wire formats move between releases: the coordinator's stats
// layout, what a front-end wake does, the NIXL compatibility-hash factors,
// the KV-event encoding. Every reference (package coordinator, handshake,
// kvevents and the engine-output receiver) takes a [Release] in its Config
// and reads the rules that release follows from [Release.Rules]; the zero
// Release means [Latest].
//
// Each rule cites the vLLM pull request (or release tag) it comes from.
package vllm

import (
	"fmt"
	"strings"
)

// Rules are the wire rules one vLLM release follows. The zero value is not
// meaningful: obtain Rules from a Release.
type Rules struct {
	// StatsKVCacheUsage: the coordinator publishes [waiting, running,
	// kv_cache_usage] per engine (vLLM PR #49204) instead of [waiting,
	// running].
	StatsKVCacheUsage bool
	// WakeSetsRunning: a front-end wake sets engines_running and publishes
	// (releases before vLLM PR #51481).
	WakeSetsRunning bool
	// ScaleUpPauses: an elastic-EP scale-up marks the engines paused
	// (older coordinators).
	ScaleUpPauses bool
	// NixlConnectorVersion is NIXL_CONNECTOR_VERSION, hashed into the
	// compatibility hash.
	NixlConnectorVersion int
	// NixlHashCrossLayersBlocks: the compatibility hash includes the
	// cross_layers_blocks factor.
	NixlHashCrossLayersBlocks bool
	// KVEventsMapForm: KV events are tagged maps (vLLM PR #42892, v0.26.0)
	// rather than tagged arrays.
	KVEventsMapForm bool
	// KVReplayTopicFrame: replay replies carry the topic frame (vLLM PR
	// #45177, v0.26.0).
	KVReplayTopicFrame bool
}

// Release is one vLLM release profile. The zero value is [Latest].
type Release struct {
	name string
}

type profile struct {
	name  string
	rules Rules
}

// profiles, oldest first; the last one is "latest".
// TODO(issue 14): verify each rule against merged PRs and release tags.
var profiles = []profile{
	{"0.25", Rules{WakeSetsRunning: true, ScaleUpPauses: true, NixlConnectorVersion: 6}},
	{"0.26", Rules{WakeSetsRunning: true, ScaleUpPauses: true, NixlConnectorVersion: 6, KVEventsMapForm: true, KVReplayTopicFrame: true}},
	{"latest", Rules{StatsKVCacheUsage: true, NixlConnectorVersion: 7, NixlHashCrossLayersBlocks: true, KVEventsMapForm: true, KVReplayTopicFrame: true}},
}

// Latest is current vLLM main as far as merged pull requests show.
var Latest = Release{}

// Parse returns the release profile named s ("latest", or a release such
// as "0.26"; a patch version such as "0.26.1" selects its minor release).
func Parse(s string) (Release, error) {
	name := strings.TrimPrefix(strings.TrimSpace(s), "v")
	if name == "" || name == "latest" {
		return Latest, nil
	}
	if parts := strings.Split(name, "."); len(parts) == 3 {
		name = parts[0] + "." + parts[1]
	}
	for _, p := range profiles[:len(profiles)-1] {
		if p.name == name {
			return Release{name: p.name}, nil
		}
	}
	return Release{}, fmt.Errorf("vllm: unknown release %q (known: %s)", s, strings.Join(Names(), ", "))
}

// Names lists the known profiles, oldest first, ending with "latest".
func Names() []string {
	out := make([]string, len(profiles))
	for i, p := range profiles {
		out[i] = p.name
	}
	return out
}

// String returns the profile's name, e.g. "0.26" or "latest".
func (r Release) String() string {
	if r.name == "" {
		return "latest"
	}
	return r.name
}

// Rules returns the wire rules of the release.
func (r Release) Rules() Rules {
	name := r.String()
	for _, p := range profiles {
		if p.name == name {
			return p.rules
		}
	}
	return profiles[len(profiles)-1].rules
}

// Package vllm names the vLLM release a zmqguard reference talks to.
//
//	r, err := vllm.Parse("0.26.1") // a patch release selects its minor profile
//	if err != nil {
//		return err
//	}
//	fmt.Println(r, r.Rules().KVEventsMapForm) // "0.26 true": the wire rules that release follows
//	for _, p := range vllm.Releases() {       // every profile, oldest first, ending with latest
//		fmt.Println(p)
//	}
//
// Every reference's Config has a Release field; its zero value is [Latest].
//
// vLLM's ZeroMQ wire formats move between releases: the coordinator's stats
// layout, what a front-end wake does, what an elastic-EP scale-up does, the
// NIXL compatibility-hash factors and connector version, the KV-event
// encoding. Every reference (package coordinator, handshake, kvevents and
// the engine-output receiver) takes a [Release] in its Config and reads the
// rules that release follows from [Release.Rules]; the zero Release means
// [Latest], current vLLM main as far as merged pull requests show.
//
// # Profiles
//
// Each rule cites the vLLM pull request it comes from. Where the first
// release tag that contains a pull request could not be established from
// vLLM's sources, the profile is named for its rule set, not for a tag:
//
//	profile         stats per engine                 wake sets running  scale-up pauses  NIXL version
//	0.25            [waiting, running]               yes                yes              5
//	0.26            [waiting, running]               yes                yes              5
//	main-pre-50620  [waiting, running, kv_cache_usage] yes              no               6
//	main-pre-51481  [waiting, running, kv_cache_usage] yes              no               7
//	latest          [waiting, running, kv_cache_usage] no (#51481)      no               7
//
// KV events are tagged arrays without a replay topic frame in 0.25, tagged
// maps with the topic frame from 0.26 on. The NIXL compatibility hash of
// every profile hashes cross_layers_blocks; main-pre-50620 adds
// speculative_config (#49230), main-pre-51481 and latest add transfer_mode
// (#50620) too.
//
// "0.25" and "0.26" are release tags: v0.26.0 is the first release with
// map-form KV events (#42892) and the replay topic frame (#45177). The
// coordinator and NIXL rules of those two profiles are the ones of the
// stored vLLM sources older than #49204 (merged 2026-07-20); whether a
// v0.26.x tag already contains #49204 could not be established, so a
// deployment on such a build whose front-ends unpack three values needs
// "main-pre-51481" (or "main-pre-50620" for a build between #49230 and
// #50620). "main-pre-50620" is vLLM main at the commit of zmqguard's golden
// vectors (2026-08-07, after #49204 and #49230, before #50620: NIXL
// connector version 6); each of its rules is checked against the bytes
// vLLM's own code wrote there. "main-pre-51481" is vLLM main after #49204, #49230 and
// #50620 and before #51481 (merged 2026-08-08), which is probably what the
// v0.27.x tags ship (unverified). docs/vllm-releases.md in the repository
// has the full table with the evidence for each rule and what could not be
// verified.
package vllm

import (
	"fmt"
	"strings"
)

// Rules are the wire rules one vLLM release follows. The zero value is not
// meaningful: obtain Rules from a Release.
type Rules struct {
	// StatsKVCacheUsage: the coordinator publishes [waiting, running,
	// kv_cache_usage] per engine instead of [waiting, running], and
	// front-ends unpack three values when routing (vLLM PR #49204, merged
	// 2026-07-20). A front-end of either kind fails on the other layout.
	StatsKVCacheUsage bool
	// WakeSetsRunning: a front-end wake while the engines are paused sets
	// engines_running and publishes the wave state. vLLM PR #51481 (merged
	// 2026-08-08) removed both: the coordinator still broadcasts
	// START_DP_WAVE, but only DP rank 0's start_wave report sets running,
	// since a paused engine discards START_DP_WAVE and the wake proves
	// nothing (RFC #51476: "running" latched forever after a pause).
	WakeSetsRunning bool
	// ScaleUpPauses: an elastic-EP scale-up (SCALE_ELASTIC_EP with a larger
	// count) sets engines_running = false. The newest stored coordinator
	// no longer does; the pull request that removed it was not identified.
	ScaleUpPauses bool
	// NixlConnectorVersion is NIXL_CONNECTOR_VERSION, hashed into the
	// compatibility hash: 5 added remote_blocks_expiry_time and the
	// handshake clock-sync timestamp, 6 the speculative-config factor
	// (vLLM PR #49230), 7 the transfer_mode factor (vLLM PR #50620).
	NixlConnectorVersion int
	// NixlHashCrossLayersBlocks: the compatibility hash includes the
	// cross_layers_blocks factor (a bool). Every stored
	// compute_nixl_compatibility_hash of connector versions 5 to 7 hashes
	// it; the pull request that added it was not identified.
	NixlHashCrossLayersBlocks bool
	// KVEventsMapForm: KV events are tagged maps (vLLM PR #42892, v0.26.0)
	// rather than tagged arrays.
	KVEventsMapForm bool
	// KVReplayTopicFrame: replay replies carry the topic frame (vLLM PR
	// #45177, v0.26.0).
	KVReplayTopicFrame bool
	// NixlHashSpeculativeConfig: the compatibility hash includes the
	// speculative_config factor, None or the EAGLE/MTP dict (vLLM PR
	// #49230, connector version 6).
	NixlHashSpeculativeConfig bool
	// NixlHashTransferMode: the compatibility hash includes the
	// transfer_mode factor, "pull" or "push" (vLLM PR #50620, connector
	// version 7).
	NixlHashTransferMode bool
}

// Release is one vLLM release profile. The zero value is [Latest]; obtain
// any other from [Parse] or [Releases]. Releases compare with ==.
type Release struct {
	name string
}

type profile struct {
	name  string
	rules Rules
}

// legacy is the rule set of the stored vLLM sources before #49204.
var legacy = Rules{
	WakeSetsRunning:           true,
	ScaleUpPauses:             true,
	NixlConnectorVersion:      5,
	NixlHashCrossLayersBlocks: true,
}

// profiles, oldest first; the last one is "latest".
var profiles = []profile{
	{"0.25", legacy},
	{"0.26", with(legacy, func(r *Rules) { r.KVEventsMapForm, r.KVReplayTopicFrame = true, true })},
	// vLLM main after #49230 and before #50620 (connector version 6), the
	// commit of zmqguard's golden vectors (2026-08-07): every rule checked
	// on vLLM's own bytes and on its sources at that commit.
	{"main-pre-50620", Rules{
		StatsKVCacheUsage:         true,
		WakeSetsRunning:           true,
		NixlConnectorVersion:      6,
		NixlHashCrossLayersBlocks: true,
		KVEventsMapForm:           true,
		KVReplayTopicFrame:        true,
		NixlHashSpeculativeConfig: true,
	}},
	{"main-pre-51481", Rules{
		StatsKVCacheUsage:         true,
		WakeSetsRunning:           true,
		NixlConnectorVersion:      7,
		NixlHashCrossLayersBlocks: true,
		KVEventsMapForm:           true,
		KVReplayTopicFrame:        true,
		NixlHashSpeculativeConfig: true,
		NixlHashTransferMode:      true,
	}},
	{"latest", Rules{
		StatsKVCacheUsage:         true,
		NixlConnectorVersion:      7,
		NixlHashCrossLayersBlocks: true,
		KVEventsMapForm:           true,
		KVReplayTopicFrame:        true,
		NixlHashSpeculativeConfig: true,
		NixlHashTransferMode:      true,
	}},
}

func with(r Rules, f func(*Rules)) Rules {
	f(&r)
	return r
}

// Latest returns the profile of current vLLM main as far as merged pull
// requests show: the zero Release.
func Latest() Release { return Release{} }

// Parse returns the release profile named s: "latest" (or ""), a profile
// name a [Releases] entry prints, or a release such as "0.26.1" or "v0.26.1", which
// selects its minor release's profile. An unknown name is an error that
// lists the known ones.
func Parse(s string) (Release, error) {
	name := strings.TrimPrefix(strings.TrimSpace(s), "v")
	if name == "" || name == "latest" {
		return Release{}, nil
	}
	if parts := strings.Split(name, "."); len(parts) == 3 {
		name = parts[0] + "." + parts[1]
	}
	for _, p := range profiles[:len(profiles)-1] {
		if p.name == name {
			return Release{name: p.name}, nil
		}
	}
	return Release{}, fmt.Errorf("vllm: unknown release %q (known: %s)", s, strings.Join(names(), ", "))
}

// MustParse is [Parse] for names known to be valid; it panics otherwise.
func MustParse(s string) Release {
	r, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return r
}

// names lists the known profiles, oldest first, ending with "latest".
func names() []string {
	out := make([]string, len(profiles))
	for i, p := range profiles {
		out[i] = p.name
	}
	return out
}

// Releases lists the known profiles, oldest first, ending with [Latest]:
// Releases()[0] is the oldest profile the references support, and the
// String of each is a name [Parse] accepts.
func Releases() []Release {
	out := make([]Release, len(profiles))
	for i, p := range profiles[:len(profiles)-1] {
		out[i] = Release{name: p.name}
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

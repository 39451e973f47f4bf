// Package vllm names the vLLM release a zmqguard reference talks to.
//
//	r, err := vllm.Parse("0.26.0") // a release number selects its profile by evidence
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
// A profile is a rule set. Each rule cites the vLLM pull request it comes
// from. Where the first release tag that contains a pull request could not
// be established from vLLM's sources, the profile is named for its rule
// set, not for a tag:
//
//	profile         stats per engine                 wake sets running  scale-up pauses  NIXL version
//	0.25            [waiting, running]               yes                yes              5
//	0.26            [waiting, running]               yes                yes              5
//	main-pre-50620  [waiting, running, kv_cache_usage] yes              no               6
//	main-pre-51481  [waiting, running, kv_cache_usage] yes              no               7
//	latest          [waiting, running, kv_cache_usage] no (#51481)      no               7
//
// KV events are tagged arrays without a replay topic frame in 0.25, tagged
// maps with the topic frame from 0.26 on (only kvevents' Publisher reads
// these two rules: the Subscriber accepts both forms). The NIXL
// compatibility hash of every profile hashes cross_layers_blocks;
// main-pre-50620 adds speculative_config (#49230), main-pre-51481 and
// latest add transfer_mode (#50620) too. "main-pre-50620" is vLLM main at
// the commit of zmqguard's golden vectors (2026-08-07, after #49204 and
// #49230, before #50620: NIXL connector version 6); each of its rules is
// checked against the bytes vLLM's own code wrote there. "main-pre-51481"
// is vLLM main after #49204, #49230 and #50620 and before #51481.
//
// # Release numbers and build versions
//
// [Parse] and [Resolve] also take what an operator knows: a release number
// ("0.27", "0.27.1", "v0.28.0") or a build's own version string with
// PEP 440 pre-release, post-release, dev and local parts ("0.28.0rc1",
// "0.27.1.dev12+g5ac2684"). A release maps to the profile whose rules the
// pull requests it contains give; [KnownReleases] is that table, each row
// "proven" or "inferred" with its evidence (the project's
// docs/vllm-releases.md has it with the citations). A release newer than
// the newest row maps to [Latest] and a patch release missing from the
// table to its minor release's profile, each with a warning naming the
// assumption ([Resolution.Warning]). A dev build X.Y.Z.devN is a commit
// after the tag before X.Y.Z: it maps to the profile of the newest known
// release before X.Y.Z (the rules it certainly has), with a warning when
// X.Y.Z's profile differs; a local part naming a commit whose rules are
// known (g5ac2684, the golden vectors' commit) maps to that commit's
// profile instead.
//
// # Options for open pull requests
//
// A profile may be followed by options, each ",prN", for builds that carry
// a vLLM pull request not merged when the profile was made:
//
//   - ",pr55776": the NIXL compatibility hash adds the model's revision and
//     code_revision, connector version 8 ([Rules.NixlHashModelRevision];
//     on the profiles of connector version 7 only);
//   - ",pr54762": the coordinator broadcasts START_DP_WAVE for wave 0 right
//     after the start-up READY ([Rules.StartWaveAfterReady]).
//
// For example "latest,pr55776" or "0.30.0,pr54762,pr55776".
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
	// 2026-07-27). A front-end of either kind fails on the other layout.
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
	// (vLLM PR #49230), 7 the transfer_mode factor (vLLM PR #50620), 8 the
	// model revision factors (vLLM PR #55776, option ",pr55776").
	NixlConnectorVersion int
	// NixlHashCrossLayersBlocks: the compatibility hash includes the
	// cross_layers_blocks factor (a bool). Every stored
	// compute_nixl_compatibility_hash of connector versions 5 to 7 hashes
	// it; the pull request that added it was not identified.
	NixlHashCrossLayersBlocks bool
	// KVEventsMapForm: KV events are tagged maps (vLLM PR #42892) rather
	// than tagged arrays.
	KVEventsMapForm bool
	// KVReplayTopicFrame: replay replies carry the topic frame (vLLM PR
	// #45177).
	KVReplayTopicFrame bool
	// NixlHashSpeculativeConfig: the compatibility hash includes the
	// speculative_config factor, None or the EAGLE/MTP dict (vLLM PR
	// #49230, connector version 6).
	NixlHashSpeculativeConfig bool
	// NixlHashTransferMode: the compatibility hash includes the
	// transfer_mode factor, "pull" or "push" (vLLM PR #50620, connector
	// version 7).
	NixlHashTransferMode bool
	// NixlHashModelRevision: the compatibility hash includes the primary
	// model's resolved revision and the configured code_revision (keys
	// "revision" and "code_revision", None when unset) and the connector
	// version is 8 (vLLM PR #55776, open when this was written: the
	// description names both values and "bump the connector version"; the
	// key names follow the speculative_config dict's and the version is
	// 7 + 1, neither seen in a merged source). Set only by the option
	// ",pr55776".
	NixlHashModelRevision bool
	// StartWaveAfterReady: right after the start-up READY, when wave
	// coordination is on and the engines are idle, the coordinator
	// broadcasts START_DP_WAVE for wave 0 with no engine excluded, so that
	// headless engine ranks start stepping before the first request (vLLM
	// PR #54762, open when this was written). Set only by the option
	// ",pr54762".
	StartWaveAfterReady bool
}

// Release is one vLLM release profile, with its options. The zero value is
// [Latest]; obtain any other from [Parse], [Resolve] or [Releases].
// Releases compare with ==.
type Release struct {
	name string
	opts options
}

// options are the ",prN" options of a Release, one bit each.
type options uint8

const (
	optPR55776 options = 1 << iota // NIXL hash with the model revision (vLLM PR #55776)
	optPR54762                     // START_DP_WAVE for wave 0 after READY (vLLM PR #54762)
)

// optionNames are the options' spellings, in bit order.
var optionNames = [...]string{"pr55776", "pr54762"}

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

// Parse returns the release profile s names: "latest" (or ""), a profile
// name a [Releases] entry prints, a release number ("0.27", "0.27.1",
// "v0.28.0") or a build's version string ("0.28.0rc1",
// "0.27.1.dev12+g5ac2684"), each optionally followed by options (",pr54762",
// ",pr55776"). It is [Resolve] without the evidence; a caller that can log
// should use Resolve and log its Warning. An unknown string is an error that
// lists the accepted forms.
func Parse(s string) (Release, error) {
	res, err := Resolve(s)
	return res.Release, err
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
// String of each is a name [Parse] accepts. No entry carries options.
func Releases() []Release {
	out := make([]Release, len(profiles))
	for i, p := range profiles[:len(profiles)-1] {
		out[i] = Release{name: p.name}
	}
	return out
}

// String returns the profile's name, e.g. "0.26" or "latest", followed by
// its options, e.g. "latest,pr55776": a string [Parse] maps back to r.
func (r Release) String() string {
	name := r.name
	if name == "" {
		name = "latest"
	}
	if r.opts == 0 {
		return name
	}
	var b strings.Builder
	b.WriteString(name)
	for i, o := range optionNames {
		if r.opts&(1<<i) != 0 {
			b.WriteString("," + o)
		}
	}
	return b.String()
}

// Rules returns the wire rules of the release, its options applied.
func (r Release) Rules() Rules {
	rules := profiles[len(profiles)-1].rules
	name := r.name
	if name == "" {
		name = "latest"
	}
	for _, p := range profiles {
		if p.name == name {
			rules = p.rules
			break
		}
	}
	if r.opts&optPR55776 != 0 {
		// vLLM PR #55776: revision and code_revision hashed, connector
		// version bumped (7 -> 8).
		rules.NixlHashModelRevision = true
		rules.NixlConnectorVersion = 8
	}
	if r.opts&optPR54762 != 0 {
		// vLLM PR #54762: START_DP_WAVE(0) broadcast after READY.
		rules.StartWaveAfterReady = true
	}
	return rules
}

// parseOptions splits s at its first comma into the version part and the
// options after it.
func parseOptions(s string) (string, options, error) {
	head, tail, found := strings.Cut(s, ",")
	if !found {
		return head, 0, nil
	}
	var opts options
	for o := range strings.SplitSeq(tail, ",") {
		o = strings.ToLower(strings.TrimSpace(o))
		i := indexOf(optionNames[:], o)
		if i < 0 {
			return "", 0, fmt.Errorf("vllm: unknown option %q in %q (known options: ,%s)", o, s, strings.Join(optionNames[:], ", ,"))
		}
		opts |= 1 << i
	}
	return head, opts, nil
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

// withOptions applies opts to r, checking that they fit its profile.
func withOptions(r Release, opts options, input string) (Release, error) {
	if opts&optPR55776 != 0 && r.Rules().NixlConnectorVersion != 7 {
		return Release{}, fmt.Errorf("vllm: option pr55776 in %q applies to a build of NIXL connector version 7 (main-pre-51481, latest), not to profile %s", input, r)
	}
	r.opts = opts
	return r, nil
}

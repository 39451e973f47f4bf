package vllm

import (
	"fmt"
	"strconv"
	"strings"
)

// Resolution is what [Resolve] made of a version string: the profile, and
// how sure the mapping is.
type Resolution struct {
	// Release is the profile (with options) the string maps to.
	Release Release
	// Version is the string as understood: a release number such as
	// "0.27.1", a build version such as "0.28.0.dev12+g5ac2684", or a
	// profile name.
	Version string
	// Proven reports that the profile's rules are established for Version
	// (a profile name, or a commit whose bytes were checked); false means
	// inferred from merge dates and release notes (see Evidence).
	Proven bool
	// Evidence says, in one line, why Version maps to the profile: the
	// pull requests that separate the profiles and what places them
	// before or after the release.
	Evidence string
	// Warning is not empty when the mapping rests on an assumption beyond
	// the table (a release newer than the newest known, a patch release
	// not in the table, a dev build between two profiles): a command logs
	// it once at WARN.
	Warning string
}

// known is one row of the release table.
type known struct {
	version  [3]int
	profile  string
	proven   bool
	evidence string
}

// Merge times below are the vLLM main commits' committer times (UTC); a
// release's window is bounded by the merge times of the pull requests its
// release notes list. Citations for every fact are in the project's
// docs/vllm-releases.md.
const (
	evPre49204 = "coordinator and NIXL rules: #49204 (merged 2026-07-27), #49230, #50620 and #51481 merged after this tag was published; "
	ev25       = evPre49204 + "KV events: #42892 (merged 2026-06-09, before every PR of v0.24.0's notes) is most likely in, " +
		"so the profile's tagged-array publishing is probably not this tag's (subscribers accept both); #45177 (merged 2026-07-07 18:48) " +
		"falls in v0.25.0's branch window (after #47187, 2026-07-06, before #47888, 2026-07-08 02:52, which v0.25.1 adds): not established"
	ev27 = "branch point between 2026-08-03 15:41 (#50656, the newest PR of the notes of the release with Kimi K3 support, " +
		"merged 2026-07-27..08-03, as quoted in truenas/apps #5568) and 2026-08-04 15:51 (v0.28.0's notes list #50580 merged then): " +
		"#49204 (2026-07-27) in; #49230 (2026-08-03 18:51) inside that window: not established; #50620 and #51481 " +
		"(merged after 2026-08-07) not in unless cherry-picked"
	ev28 = "v0.28.0's notes list pull requests merged after 2026-08-07 and opened after #51481, so its branch point follows " +
		"#50620 and #51481 (both merged, neither on main on 2026-08-07)"
	evLater = "no pull request that separates the profiles merged after #51481 (#54762, #55776 and #51433 open in their threads)"
)

// releases is the release table, oldest first.
var releases = []known{
	{[3]int{0, 25, 0}, "0.25", false, "published 2026-07-11; " + ev25},
	{[3]int{0, 25, 1}, "0.25", false, "v0.25.0 plus #47888 and #48330 (release notes); " + ev25},
	{[3]int{0, 26, 0}, "0.26", false, "#42892 and #45177 merged before the first PR of v0.26.0's notes (2026-07-10); #49204 merged " +
		"2026-07-27, ten days after the newest (2026-07-17); published by 2026-07-31 (vLLM #50522)"},
	{[3]int{0, 27, 0}, "main-pre-50620", false, "published by 2026-08-11; " + ev27},
	{[3]int{0, 27, 1}, "main-pre-50620", false, "published by 2026-08-13; as v0.27.0: " + ev27},
	{[3]int{0, 28, 0}, "latest", false, ev28},
	{[3]int{0, 29, 0}, "latest", false, "published by 2026-09-09; " + evLater},
	{[3]int{0, 30, 0}, "latest", false, "published by 2026-09-23; " + evLater},
}

// knownCommits are vLLM commits whose rules were checked on vLLM's own
// bytes: a build's local version part g<hash> naming one maps to its
// profile, proven.
var knownCommits = []struct{ hash, profile, evidence string }{
	{"5ac2684976ee22c04fe0d2f968c6cf6096b383f2", "main-pre-50620",
		"the golden vectors' commit (vLLM main 2026-08-07): every rule checked on the bytes vLLM's code wrote there"},
}

// KnownReleases returns the release table, oldest first: every vLLM
// release zmqguard has evidence for, with its profile and that evidence.
func KnownReleases() []Resolution {
	out := make([]Resolution, len(releases))
	for i, k := range releases {
		out[i] = Resolution{Release: profileRelease(k.profile), Version: versionString(k.version), Proven: k.proven, Evidence: k.evidence}
	}
	return out
}

func profileRelease(name string) Release {
	if name == "latest" {
		return Release{}
	}
	return Release{name: name}
}

func versionString(v [3]int) string { return fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2]) }

// Resolve maps s to a profile and says how: s is "latest" (or ""), a
// profile name, a release number ("0.27", "0.27.1", "v0.28.0") or a
// build's PEP 440 version ("0.28.0rc1", "0.27.1.post1",
// "0.27.1.dev12+g5ac2684"), optionally followed by options (",pr54762",
// ",pr55776"; see the package doc). The rules for numbers not in
// [KnownReleases] are in the package doc. An unknown string, or a release
// older than the oldest profile, is an error that lists the accepted forms.
func Resolve(s string) (Resolution, error) {
	in := strings.TrimSpace(s)
	head, opts, err := parseOptions(in)
	if err != nil {
		return Resolution{}, err
	}
	res, err := resolveVersion(strings.TrimSpace(head), in)
	if err != nil {
		return Resolution{}, err
	}
	if res.Release, err = withOptions(res.Release, opts, in); err != nil {
		return Resolution{}, err
	}
	return res, nil
}

func resolveVersion(s, input string) (Resolution, error) {
	if s == "" {
		s = "latest"
	}
	v, ok := parsePEP440(s)
	if !ok && indexOf(names(), s) >= 0 {
		// A profile named for its rule set ("main-pre-50620", "latest");
		// "0.25" and "0.26" are release numbers and take the table's row.
		return Resolution{Release: profileRelease(s), Version: s, Proven: true, Evidence: "profile name"}, nil
	}
	if !ok {
		return Resolution{}, unknownError(input)
	}
	if v.commit != "" {
		for _, c := range knownCommits {
			if strings.HasPrefix(c.hash, v.commit) {
				return Resolution{Release: profileRelease(c.profile), Version: v.text, Proven: true, Evidence: c.evidence}, nil
			}
		}
	}
	oldest := releases[0].version
	if v.dev {
		// A dev build of X.Y.Z is a commit after the tag before X.Y.Z:
		// take the newest known release before X.Y.Z (rules it has).
		prev := -1
		for i, k := range releases {
			if less(k.version, v.num) {
				prev = i
			}
		}
		if prev < 0 {
			return Resolution{}, olderError(input, oldest)
		}
		p := releases[prev]
		res := Resolution{Release: profileRelease(p.profile), Version: v.text,
			Evidence: "a dev build of " + versionString(v.num) + " is a commit after " + versionString(p.version) + "'s tag: " +
				versionString(p.version) + "'s profile, the rules it certainly has"}
		next, err := resolveRelease(v.num, v.minorOnly, input)
		switch {
		case err == nil && next.Release.name != profileRelease(p.profile).name:
			res.Warning = fmt.Sprintf("vllm: %s is a dev build between %s (profile %s) and %s (profile %s): assumed %s; "+
				"name a later profile if the build carries the pull requests that separate them", v.text,
				versionString(p.version), profileRelease(p.profile), versionString(v.num), next.Release, profileRelease(p.profile))
		case err == nil && next.Warning != "" && prev == len(releases)-1:
			res.Warning = fmt.Sprintf("vllm: %s is a dev build after %s, the newest release in zmqguard's table: assumed it follows %s", v.text,
				versionString(p.version), profileRelease(p.profile))
		}
		return res, nil
	}
	if less(v.num, oldest) && !(v.minorOnly && v.num[0] == oldest[0] && v.num[1] == oldest[1]) {
		return Resolution{}, olderError(input, oldest)
	}
	res, err := resolveRelease(v.num, v.minorOnly, input)
	if err != nil {
		return Resolution{}, err
	}
	res.Version = v.text
	if v.pre != "" {
		res.Evidence = "a release candidate of " + versionString(v.num) + " is built from its release branch: " + res.Evidence
	}
	return res, nil
}

// resolveRelease maps a release number (no dev part) to its row, its minor
// release's newest row, or latest when newer than every row.
func resolveRelease(num [3]int, minorOnly bool, input string) (Resolution, error) {
	for _, k := range releases {
		if k.version == num && !minorOnly {
			return Resolution{Release: profileRelease(k.profile), Version: versionString(num), Proven: k.proven, Evidence: k.evidence}, nil
		}
	}
	last := -1
	for i, k := range releases {
		if k.version[0] == num[0] && k.version[1] == num[1] {
			last = i
		}
	}
	if last >= 0 {
		k := releases[last]
		res := Resolution{Release: profileRelease(k.profile), Version: versionString(num), Proven: k.proven, Evidence: k.evidence}
		if minorOnly {
			res.Version = fmt.Sprintf("%d.%d", num[0], num[1])
			if !samePatchProfiles(num) {
				res.Warning = fmt.Sprintf("vllm: the patch releases of %s map to different profiles: assumed %s's (%s); name the patch release", res.Version, versionString(k.version), res.Release)
			}
			return res, nil
		}
		res.Warning = fmt.Sprintf("vllm: %s is not in zmqguard's release table: a patch release carries fixes only, so assumed the profile of %s (%s)",
			versionString(num), versionString(k.version), res.Release)
		return res, nil
	}
	newest := releases[len(releases)-1].version
	if less(newest, num) {
		v := versionString(num)
		if minorOnly {
			v = fmt.Sprintf("%d.%d", num[0], num[1])
		}
		return Resolution{Version: v, Evidence: "newer than every release in the table",
			Warning: fmt.Sprintf("vllm: %s is newer than the newest release in zmqguard's table (%s): assumed it follows latest "+
				"(vLLM main with #51481; the open #54762 and #55776 are options, not assumed)", v, versionString(newest))}, nil
	}
	return Resolution{}, unknownError(input)
}

// samePatchProfiles reports whether every row of num's minor release maps
// to one profile.
func samePatchProfiles(num [3]int) bool {
	p := ""
	for _, k := range releases {
		if k.version[0] == num[0] && k.version[1] == num[1] {
			if p != "" && k.profile != p {
				return false
			}
			p = k.profile
		}
	}
	return true
}

func less(a, b [3]int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

func olderError(input string, oldest [3]int) error {
	return fmt.Errorf("vllm: release %q is older than the oldest release zmqguard models (%s, profile %s)", input, versionString(oldest), profiles[0].name)
}

func unknownError(input string) error {
	return fmt.Errorf("vllm: unknown release %q: want latest, a profile (known: %s), a release number such as 0.27, 0.27.1 or v0.28.0, "+
		"or a build's version such as 0.28.0rc1 or 0.27.1.dev12+g5ac2684, optionally followed by ,pr54762 or ,pr55776",
		input, strings.Join(names(), ", "))
}

// pep440 is the part of a PEP 440 version Resolve uses.
type pep440 struct {
	text      string // normalised: no "v", lower case
	num       [3]int // release number, a missing patch as 0
	minorOnly bool   // the release number had two components
	pre       string // "a1", "b2", "rc1" or ""
	dev       bool   // a .devN part
	commit    string // the hex of a g<hex> local segment, or ""
}

// parsePEP440 parses [v]X.Y[.Z][{a|b|rc}N][.postN][.devN][+local] with
// optional '.', '-' or '_' before the pre, post and dev parts.
func parsePEP440(s string) (pep440, bool) {
	s = strings.TrimPrefix(strings.ToLower(s), "v")
	v := pep440{text: s}
	if s == "" {
		return v, false
	}
	if i := strings.IndexByte(s, '+'); i >= 0 {
		local := s[i+1:]
		if !validLocal(local) {
			return v, false
		}
		for seg := range strings.SplitSeq(local, ".") {
			if len(seg) >= 8 && seg[0] == 'g' && isHex(seg[1:]) {
				v.commit = seg[1:]
			}
		}
		s = s[:i]
	}
	// Release number: 2 or 3 dot-separated non-negative integers.
	n, rest := 0, s
	for n < 3 {
		j := 0
		for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
			j++
		}
		if j == 0 || j > 9 {
			return v, false
		}
		v.num[n], _ = strconv.Atoi(rest[:j])
		n++
		rest = rest[j:]
		if n < 3 && len(rest) > 1 && rest[0] == '.' && rest[1] >= '0' && rest[1] <= '9' {
			rest = rest[1:]
			continue
		}
		break
	}
	if n < 2 {
		return v, false
	}
	v.minorOnly = n == 2
	for _, part := range []string{"pre", "post", "dev"} {
		if rest == "" {
			break
		}
		body := strings.TrimLeft(rest[:1], ".-_") + rest[1:]
		var tag string
		switch part {
		case "pre":
			for _, t := range []string{"rc", "a", "b"} {
				if strings.HasPrefix(body, t) {
					tag = t
					break
				}
			}
		case "post":
			if strings.HasPrefix(body, "post") {
				tag = "post"
			}
		case "dev":
			if strings.HasPrefix(body, "dev") {
				tag = "dev"
			}
		}
		if tag == "" {
			continue
		}
		num := body[len(tag):]
		j := 0
		for j < len(num) && num[j] >= '0' && num[j] <= '9' {
			j++
		}
		if j == 0 || j > 9 {
			return v, false
		}
		switch part {
		case "pre":
			v.pre = tag + num[:j]
		case "dev":
			v.dev = true
		}
		rest = num[j:]
	}
	if rest != "" || (v.minorOnly && (v.pre != "" || v.dev)) {
		return v, false
	}
	return v, true
}

// validLocal reports whether s is a PEP 440 local version label:
// alphanumeric segments separated by dots.
func validLocal(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for seg := range strings.SplitSeq(s, ".") {
		if seg == "" {
			return false
		}
		for _, c := range seg {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
				return false
			}
		}
	}
	return true
}

func isHex(s string) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return s != ""
}

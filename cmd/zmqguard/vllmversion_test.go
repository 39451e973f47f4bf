package main

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

// vllmVersionCases are --vllm-version values and the profile each selects:
// every vLLM release 0.25.x to 0.31.x zmqguard's table knows, releases it
// does not (a patch missing from the table, 0.31 newer than the newest),
// release candidates, post releases and dev builds (vllm.Resolve's rules).
var vllmVersionCases = []struct{ in, profile string }{
	{"0.25", "0.25"}, {"0.25.0", "0.25"}, {"v0.25.1", "0.25"},
	{"0.26", "0.26"}, {"0.26.0", "0.26"}, {"0.26.2", "0.26"},
	{"0.27", "main-pre-50620"}, {"0.27.0", "main-pre-50620"}, {"0.27.1", "main-pre-50620"},
	{"v0.28.0", "latest"}, {"0.29.0", "latest"}, {"0.30.0", "latest"}, {"0.31.0", "latest"}, {"0.31.1", "latest"},
	{"0.28.0rc1", "latest"}, {"0.27.1.post1", "main-pre-50620"},
	{"0.27.1.dev12+g5ac2684", "main-pre-50620"}, {"0.28.0.dev3", "main-pre-50620"},
	{"latest", "latest"}, {"main-pre-51481", "main-pre-51481"}, {"latest,pr55776", "latest,pr55776"},
}

// TestVLLMVersionEveryCommand: every command that speaks vLLM's wire takes
// --vllm-version through the shared helper and maps release numbers and
// build versions to the right profile; a bad value is one usage line that
// lists the accepted forms.
func TestVLLMVersionEveryCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var with []string
	for _, c := range commands {
		name := c.commandSpec().name
		if c.flags(newEnv(io.Discard, io.Discard, false)).Lookup("vllm-version") == nil {
			continue
		}
		with = append(with, name)
		for _, tc := range vllmVersionCases {
			fs := c.flags(newEnv(io.Discard, io.Discard, false))
			if err := fs.Parse([]string{"--vllm-version", tc.in}); err != nil {
				t.Errorf("%s --vllm-version %s: %v", name, tc.in, err)
				continue
			}
			if got := fs.Lookup("vllm-version").Value.String(); got != tc.profile {
				t.Errorf("%s --vllm-version %s: profile %s, want %s", name, tc.in, got, tc.profile)
			}
			var out, errOut bytes.Buffer
			if code := run(ctx, []string{name, "--vllm-version", tc.in, "-h"}, &out, &errOut, false); code != 0 || errOut.Len() != 0 {
				t.Errorf("%s --vllm-version %s -h: exit %d, stderr %q", name, tc.in, code, errOut.String())
			}
		}
		for _, bad := range []string{"0.24", "0.27.1.dev", "bogus", "latest,pr1"} {
			var out, errOut bytes.Buffer
			code := run(ctx, []string{name, "--vllm-version", bad}, &out, &errOut, false)
			if code != 2 || !strings.Contains(errOut.String(), "-vllm-version") || strings.Count(errOut.String(), "\n") != 1 {
				t.Errorf("%s --vllm-version %s: exit %d, stderr %q", name, bad, code, errOut.String())
			}
		}
	}
	want := []string{"demo", "coordinator", "handshake-listener", "probe", "outputs", "kv-events", "kv-publish"}
	slices.Sort(with)
	slices.Sort(want)
	if !slices.Equal(with, want) {
		t.Fatalf("commands with --vllm-version: %v, want %v", with, want)
	}
}

// TestVLLMVersionWarning: a release newer than zmqguard's table starts the
// command with latest and one WARN that names the assumption (each command
// here then stops at a missing required flag, after the logger is up).
func TestVLLMVersionWarning(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, name := range []string{"coordinator", "handshake-listener", "probe", "outputs", "kv-events", "kv-publish"} {
		for _, tc := range []struct {
			in   string
			warn int
		}{{"0.31.0", 1}, {"0.30.0", 0}, {"0.28.0.dev3", 1}, {"0.27.1.dev12+g5ac2684", 0}} {
			var out, errOut bytes.Buffer
			code := run(ctx, []string{"--log-format", "text", name, "--vllm-version", tc.in}, &out, &errOut, false)
			if code != 2 {
				t.Errorf("%s --vllm-version %s: exit %d, stderr %q", name, tc.in, code, errOut.String())
			}
			if n := strings.Count(errOut.String(), "level=WARN msg=\"vllm: "); n != tc.warn {
				t.Errorf("%s --vllm-version %s: %d vllm warnings, want %d: %q", name, tc.in, n, tc.warn, errOut.String())
			}
			if tc.warn == 1 && tc.in == "0.31.0" && !strings.Contains(errOut.String(), "newer than the newest release in zmqguard's table (0.30.0)") {
				t.Errorf("%s: the warning does not name the assumption: %q", name, errOut.String())
			}
		}
	}
}

// TestVersionProfiles: 'zmqguard version --profiles' prints every profile
// and every release of the table with its class and evidence.
func TestVersionProfiles(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"version", "--profiles"}, &out, &errOut, false); code != 0 || errOut.Len() != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
	s := out.String()
	for _, want := range []string{"0.25.0  -> 0.25", "0.26.0  -> 0.26", "0.27.1  -> main-pre-50620", "0.28.0  -> latest",
		"0.30.0  -> latest", "inferred", "#49204", "#51481", "newer than 0.30.0 -> latest", "main-pre-51481", "pr55776", "+g5ac2684"} {
		if !strings.Contains(s, want) {
			t.Errorf("version --profiles lacks %q:\n%s", want, s)
		}
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/handshake"
	"github.com/zmqguard/zmqguard/internal/ref/nixlwire"
	"github.com/zmqguard/zmqguard/vllm"
)

func TestParseInterleaved(t *testing.T) {
	for _, c := range []struct {
		args []string
		pos  []string
		d    string
		b    bool
	}{
		{[]string{"a", "b"}, []string{"a", "b"}, "", false},
		{[]string{"-d", "x", "a"}, []string{"a"}, "x", false},
		{[]string{"a", "--d", "x", "b"}, []string{"a", "b"}, "x", false},
		{[]string{"a", "b", "-d=x", "-b"}, []string{"a", "b"}, "x", true},
		{[]string{"-b", "a", "--", "-d", "y"}, []string{"a", "-d", "y"}, "", true},
		{[]string{"a", "-d", "--", "b"}, []string{"a", "b"}, "--", false}, // "--" as a flag's value
		{[]string{"--", "--"}, []string{"--"}, "", false},
		{nil, nil, "", false},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		d := fs.String("d", "", "")
		b := fs.Bool("b", false, "")
		pos, err := parseInterleaved(fs, c.args)
		if err != nil || !slices.Equal(pos, c.pos) || *d != c.d || *b != c.b {
			t.Errorf("%q: pos %q d %q b %v err %v; want %q %q %v", c.args, pos, *d, *b, err, c.pos, c.d, c.b)
		}
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if _, err := parseInterleaved(fs, []string{"a", "-nope"}); err == nil {
		t.Error("unknown flag after a positional accepted")
	}
	if _, err := parseInterleaved(fs, []string{"a", "-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h after a positional: %v", err)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"1048576": 1 << 20, "1MiB": 1 << 20, "64KiB": 64 << 10, "64kib": 64 << 10, "1.5MiB": 3 << 19,
		"2M": 2 << 20, "1MB": 1e6, "10kB": 1e4, "1GiB": 1 << 30, "512B": 512, " 7 KiB ": 7 << 10, "0": 0,
	} {
		got, err := parseSize(in)
		if err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "MiB", "-1", "1XB", "lots", "1e30GiB", "0x10"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) accepted", bad)
		}
	}
	for n, want := range map[int64]string{1 << 20: "1MiB", 64 << 10: "64KiB", 1000: "1000", 3 << 30: "3GiB"} {
		if got := formatSize(n); got != want {
			t.Errorf("formatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestNewLogger(t *testing.T) {
	for _, c := range []struct {
		format string
		term   bool
		check  func(string) bool
	}{
		{"json", false, func(s string) bool { return json.Valid([]byte(strings.TrimSpace(s))) }},
		{"text", true, func(s string) bool { return strings.Contains(s, "level=WARN") }},
		{"auto", false, func(s string) bool { return strings.Contains(s, "level=WARN") }},
		{"auto", true, func(s string) bool { return strings.Contains(s, "\x1b[") && strings.Contains(s, "WRN") }},
		{"tint", false, func(s string) bool { return !strings.Contains(s, "\x1b[") && strings.Contains(s, "WRN") }},
	} {
		var b bytes.Buffer
		l, err := newLogger(&b, c.format, "warn", c.term)
		if err != nil {
			t.Fatal(err)
		}
		l.Info("hidden")
		l.Warn("shown", "k", 1)
		if out := b.String(); strings.Contains(out, "hidden") || !c.check(out) {
			t.Errorf("format %s term %v: %q", c.format, c.term, out)
		}
	}
	if _, err := newLogger(io.Discard, "xml", "info", false); err == nil {
		t.Error("bad format accepted")
	}
	if _, err := newLogger(io.Discard, "json", "loud", false); err == nil {
		t.Error("bad level accepted")
	}
}

func TestCheckOwnAddress(t *testing.T) {
	ctx := context.Background()
	for _, ok := range []string{"tcp://127.0.0.1:5600", "tcp://[::1]:5600", "127.0.0.2:1", "ipc:///tmp/x"} {
		if err := checkOwnAddress(ctx, ok); err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"tcp://192.0.2.1:5600", "tcp://[2001:db8::1]:1"} {
		if err := checkOwnAddress(ctx, bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestDemoData(t *testing.T) {
	// The demo factor set's hash per release, as documented in README ("The
	// CLI"); each is checked against Python in package handshake's
	// TestCompatibilityHashReleases for the same rule sets.
	hashes := map[string]string{
		"0.25":           "4480df8ae49c48c4492bfd9b3f592a78ee5d1b7ce7f5debbc0ad39887a26e488",
		"0.26":           "a37489c55b0d4d79cc4406c006ed530c635eac50fa2321428025e98b89ed0c19",
		"main-pre-50620": "bbf48972d7404f422b56e7689e4c7fdb18cb1684d0c4a525422c478eac81375d",
		"main-pre-51481": "8389d13ede802fc72f1fe8a496e6d5929527e8b12ea02fb669b0cc1857930361",
		"latest":         "07a87dd029ee52418003e86624b5e0688526b22465e157c4ade516fe804a909c",
	}
	for _, r := range vllm.Releases() {
		if h := demoHashFor(r); h != hashes[r.String()] {
			t.Errorf("%s: demo hash %s, documented %s", r, h, hashes[r.String()])
		}
	}
	doc, err := os.ReadFile("../../docs/vllm-releases.md")
	if err != nil {
		t.Fatal(err)
	}
	for name, h := range hashes {
		if !strings.Contains(string(doc), "`"+name+"` `"+h+"`") {
			t.Errorf("docs/vllm-releases.md does not document %s's demo hash %s", name, h)
		}
	}
	documented := hashes["latest"]
	if h := demoHash(); h != documented {
		t.Fatalf("demo hash %s, documented %s", h, documented)
	}
	var rel vllm.Release
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	r := releaseFlag(fs)
	if err := fs.Parse([]string{"--vllm-version", "0.26.2"}); err != nil || r.String() != "0.26" {
		t.Fatalf("--vllm-version 0.26.2: %v %v", r, err)
	}
	if err := fs.Parse([]string{"--vllm-version", "0.1"}); err == nil {
		t.Fatal("--vllm-version 0.1 accepted")
	}
	if r := releaseFlag(flag.NewFlagSet("y", flag.ContinueOnError)); *r != rel {
		t.Fatalf("default release %v, want latest", r)
	}
	// Profiles up to main-pre-50620 write vLLM's 11-field NixlAgentMetadata.
	for r, keys := range map[string]uint32{"main-pre-50620": 11, "0.25": 11, "latest": 19} {
		ps, err := demoPayloads("e", documented, vllm.MustParse(r), 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		p, err := nixlwire.DecodePayload(ps[handshake.Rank{}])
		if err != nil {
			t.Fatal(err)
		}
		if n, _, err := msgp.ReadMapHeaderBytes(p.AgentMetadataBytes); err != nil || n != keys {
			t.Errorf("%s: agent metadata with %d keys, want %d (%v)", r, n, keys, err)
		}
	}
	ps, err := demoPayloads("e", documented, vllm.Latest(), 2, 3)
	if err != nil || len(ps) != 6 {
		t.Fatalf("%d payloads, %v", len(ps), err)
	}
	p, err := nixlwire.DecodePayload(ps[handshake.Rank{PP: 1, TP: 2}])
	if err != nil {
		t.Fatal(err)
	}
	m, err := p.AgentMetadata()
	if err != nil || p.CompatibilityHash != documented || m.EngineID != "e" || m.DeviceID != 2 || m.NumBlocks != 1102 ||
		m.KVCacheLayout != "HND" || m.BlockSize != 16 || len(m.KVCachesBaseAddr) != 2 {
		t.Fatalf("metadata %+v, %v", m, err)
	}
}

// TestRunInProcess covers dispatch paths cheaply, without a process.
func TestRunInProcess(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"help"}, &out, &errOut, false); code != 0 || !strings.Contains(out.String(), "Commands:") {
		t.Errorf("help: %d %q", code, out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"--log-format", "json", "sink", "-h"}, &out, &errOut, false); code != 0 ||
		!strings.Contains(out.String(), "-count") {
		t.Errorf("sink -h: %d %q", code, out.String())
	}
}

// FuzzParseSize: a --max-message-size value never panics the parser, an
// accepted size is not negative, and formatSize's rendering parses back.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"1048576", "1MiB", "64KiB", "1.5MB", "0", "-1", "1e400GiB", "NaNk", "InfMiB", " 2 g "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseSize(s)
		if err != nil {
			return
		}
		if n < 0 {
			t.Fatalf("parseSize(%q) = %d", s, n)
		}
		if back, err := parseSize(formatSize(n)); err != nil || back != n {
			t.Fatalf("formatSize(%d) = %q parses as %d, %v", n, formatSize(n), back, err)
		}
	})
}

package discovery

import (
	"strings"
	"testing"
)

// FuzzParseSources: the sources-file parser never panics, accepts only
// endpoints checkEndpoint accepts, names each source by its live endpoint
// once, and reports bad lines with numbers in order within the file.
func FuzzParseSources(f *testing.F) {
	f.Add([]byte("tcp://10.0.0.5:5557 tcp://10.0.0.5:5558\n# c\ntcp://10.0.0.6:5557\n"))
	f.Add([]byte("tcp://[::1]:5557\r\nipc:///x\n\n  # only\nbad line here x\n"))
	f.Add([]byte("tcp://h:0\ntcp://*:1\ntcp://h:1 tcp://h:1\ntcp://h:1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		srcs, bad := parseSources(data)
		lines := strings.Count(string(data), "\n") + 1
		seen := map[string]bool{}
		for _, s := range srcs {
			if s.Name != s.Live || seen[s.Live] {
				t.Fatalf("source %+v named wrong or twice", s)
			}
			seen[s.Live] = true
			if checkEndpoint(s.Live) != nil || (s.Replay != "" && checkEndpoint(s.Replay) != nil) {
				t.Fatalf("bad endpoint accepted: %+v", s)
			}
		}
		prev := 0
		for _, b := range bad {
			if b.line <= prev || b.line > lines {
				t.Fatalf("bad line numbers out of order or range: %v", bad)
			}
			prev = b.line
		}
	})
}

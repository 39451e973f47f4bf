package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
)

// duplicateKeys returns the keys that appear more than once in one object
// of a JSON log line (nested objects, slog's groups, each checked on its
// own), as "key" or "group.key"; an error when the line is not one JSON
// object.
func duplicateKeys(line string) ([]string, error) {
	dec := json.NewDecoder(strings.NewReader(line))
	dec.UseNumber()
	var dups []string
	var object func(prefix string) error
	var value func(prefix string) error
	value = func(prefix string) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			return object(prefix)
		case json.Delim('['):
			for dec.More() {
				if err := value(prefix); err != nil {
					return err
				}
			}
			_, err := dec.Token() // ]
			return err
		}
		return nil
	}
	object = func(prefix string) error {
		seen := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return err
			}
			k := tok.(string)
			if seen[k] {
				dups = append(dups, prefix+k)
			}
			seen[k] = true
			if err := value(prefix + k + "."); err != nil {
				return err
			}
		}
		_, err := dec.Token() // }
		return err
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object: %q", line)
	}
	if err := object(""); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("more than one JSON value: %q", line)
	}
	return dups, nil
}

// checkJSONLog fails t for every stderr line that is not a JSON object or
// has a key twice, and returns how many lines it read.
func checkJSONLog(t *testing.T, stderr string) int {
	t.Helper()
	n := 0
	for line := range strings.SplitSeq(strings.TrimSpace(stderr), "\n") {
		if line == "" {
			continue
		}
		n++
		dups, err := duplicateKeys(line)
		if err != nil {
			t.Errorf("log line %d: %v", n, err)
			continue
		}
		if len(dups) > 0 {
			t.Errorf("log line %d has %s more than once: %s", n, strings.Join(dups, ", "), line)
		}
	}
	return n
}

// checkJSONLogKeys fails t for every JSON line of stderr (a line opening
// with "{") that has a key twice: start runs it on the stderr of every
// command a test runs with --log-format json, so every command's log is
// checked, not only the demo's.
func checkJSONLogKeys(t *testing.T, stderr string) {
	t.Helper()
	for line := range strings.SplitSeq(stderr, "\n") {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		if dups, err := duplicateKeys(line); err == nil && len(dups) > 0 {
			t.Errorf("log line has %s more than once: %s", strings.Join(dups, ", "), line)
		}
	}
}

// TestDuplicateKeys checks the checker: a slog JSON line with a key twice
// at the top or in a group is caught, a clean one passes, a non-object
// line is an error.
func TestDuplicateKeys(t *testing.T) {
	for _, c := range []struct {
		line string
		want []string
	}{
		{`{"time":"t","level":"WARN","msg":"m","component":"handshake","component":"nixl-handshake"}`, []string{"component"}},
		{`{"msg":"m","g":{"a":1,"a":[{"b":1,"b":2}]},"a":2}`, []string{"g.a", "g.a.b"}},
		{`{"msg":"m","service":"handshake","component":"nixl-handshake","peer":"1.2.3.4:5"}`, nil},
	} {
		got, err := duplicateKeys(c.line)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("duplicateKeys(%s) = %q, %v; want %q", c.line, got, err, c.want)
		}
	}
	for _, bad := range []string{`time=x msg=m`, `[1]`, `{"a":1}{"b":2}`, `{"a":`} {
		if _, err := duplicateKeys(bad); err == nil {
			t.Errorf("duplicateKeys(%s): no error", bad)
		}
	}
}

// Command skipreport lists what a test run did not run: it reads the JSON
// stream of `go test -json` on stdin and prints every skipped test with its
// reason, the tests whose peers were missing (the missingpeer marker,
// "MISSING PEER:", in a skip or a log line) first, then the failed tests'
// names, then the apt-get command that installs every missing peer. From the module root:
//
//	go test -count=1 -json ./... | go run ./internal/testkit/skipreport
//
// It exits 1 when the input holds no test event at all (go test failed to
// start, or the pipe was wrong), 0 otherwise: the test results themselves
// are go test's to report.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
)

const marker = "MISSING PEER:" // missingpeer.Marker

// module is this module's path; packages are printed relative to it.
const module = "github.com/zmqguard/zmqguard"

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// skip is one skipped test, or a test that logged a missing peer.
type skip struct {
	pkg, test string
	reason    []string // its output lines, trimmed
	peer      bool     // a line carries the marker
}

type report struct {
	skips                  []skip
	failures               []string // "package test" of every failed test
	events                 int
	passed, failed, cached int
	packages               []string // every package seen, for the totals
}

var install = regexp.MustCompile("apt-get install ([a-z0-9][a-z0-9.+ -]*)")

func main() {
	r, err := read(os.Stdin)
	if err == nil {
		err = r.write(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "skipreport:", err)
		os.Exit(1)
	}
}

// read collects the skips of a `go test -json` stream.
func read(in io.Reader) (*report, error) {
	r := &report{}
	output := map[[2]string][]string{} // (package, test) -> output lines
	seen := map[string]bool{}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue // a build error or other text go test printed
		}
		var e event
		if json.Unmarshal(line, &e) != nil || e.Action == "" {
			continue
		}
		r.events++
		if e.Package != "" && !seen[e.Package] {
			seen[e.Package] = true
			r.packages = append(r.packages, e.Package)
		}
		key := [2]string{e.Package, e.Test}
		switch e.Action {
		case "output":
			if e.Test == "" && strings.Contains(e.Output, "(cached)") {
				r.cached++
			}
			if e.Test != "" {
				output[key] = append(output[key], e.Output)
			}
		case "skip", "pass", "fail":
			if e.Test == "" {
				break // a package's result
			}
			lines := output[key]
			delete(output, key)
			s := skip{pkg: e.Package, test: e.Test}
			for _, l := range lines {
				l = strings.TrimSpace(l)
				if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- ") {
					continue
				}
				s.reason = append(s.reason, l)
				if strings.Contains(l, marker) {
					s.peer = true
				}
			}
			switch e.Action {
			case "pass":
				r.passed++
			case "fail":
				r.failed++
				r.failures = append(r.failures, e.Package+" "+e.Test)
			}
			if e.Action == "skip" || s.peer { // a passing test may log a missing peer (bench)
				r.skips = append(r.skips, s)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if r.events == 0 {
		return nil, fmt.Errorf("no `go test -json` events on stdin (run: go test -json ./... | go run ./internal/testkit/skipreport)")
	}
	return r, nil
}

// relative writes a package of this module as ./path.
func relative(pkg string) string {
	if rest, ok := strings.CutPrefix(pkg, module); ok && (rest == "" || rest[0] == '/') {
		return "." + rest
	}
	return pkg
}

func (r *report) write(w io.Writer) error {
	// Peers first, then other skips, each in package, test order.
	slices.SortStableFunc(r.skips, func(a, b skip) int {
		if a.peer != b.peer {
			if a.peer {
				return -1
			}
			return 1
		}
		return strings.Compare(a.pkg+" "+a.test, b.pkg+" "+b.test)
	})
	var pkgs []string
	peers := 0
	for _, s := range r.skips {
		why := strings.Join(s.reason, " | ")
		if why == "" {
			why = "(no reason given)"
		}
		kind := "SKIP"
		if s.peer {
			kind = "MISSING PEER"
			peers++
			for _, m := range install.FindAllStringSubmatch(why, -1) {
				for _, p := range strings.Fields(m[1]) {
					if !slices.Contains(pkgs, p) {
						pkgs = append(pkgs, p)
					}
				}
			}
			if i := strings.Index(why, marker); i >= 0 {
				why = strings.TrimPrefix(why[i+len(marker):], " "+s.test+": ")
			}
		}
		fmt.Fprintf(w, "%-12s %s %s: %s\n", kind, relative(s.pkg), s.test, strings.TrimSpace(why))
	}
	for _, f := range r.failures { // go test reports why; named here so none is missed
		pkg, test, _ := strings.Cut(f, " ")
		fmt.Fprintf(w, "%-12s %s %s\n", "FAILED", relative(pkg), test)
	}
	fmt.Fprintf(w, "\n%d packages, %d tests passed, %d failed, %d listed above (%d for a missing peer)\n",
		len(r.packages), r.passed, r.failed, len(r.skips), peers)
	if len(pkgs) > 0 {
		slices.Sort(pkgs)
		fmt.Fprintf(w, "to run what a missing peer skipped: sudo apt-get install %s, then go test -count=1 again\n", strings.Join(pkgs, " "))
	}
	if r.cached > 0 {
		fmt.Fprintf(w, "note: %d packages' results came from the test cache (a peer installed since is not seen): use -count=1\n", r.cached)
	}
	_, err := fmt.Fprint(w)
	return err
}

// Command fanout measures the DP coordinator's stats publication while many
// subscribers holding many topics each are attached to its front publish
// (XPUB) socket, and what their departure costs (issue 23).
//
//	go run ./bench/fanout [-subs 1000] [-topics 10000] [-quick] [-out FILE]
//
// It starts the coordinator as a child process (this program re-executed
// with FANOUT_ROLE=coordinator: package coordinator's New and Run on
// loopback, one engine, the socket-wide topic bounds lifted and heartbeats
// off so that every subscription is held), and plays, over raw ZMTP
// (zmtpguard.Dial), bytes built here (FANOUT_CPUPROFILE=FILE makes the
// child write a CPU profile of its whole run there):
//
//   - one engine: it subscribes on back publish, waits for READY, then
//     pushes EngineCoreOutputs with scheduler stats every 10 ms whose
//     num_waiting_reqs is the milliseconds since the run started, so that a
//     publication carries the time its stats were sent;
//   - one live front-end (an XSUB subscribed to everything) that records
//     every stats publication: its inter-arrival time and its age (now minus
//     the time the stats it carries were sent);
//   - -subs subscribers (XSUB) that each subscribe to -topics distinct topics
//     that no publication matches, and never read.
//
// Phases: baseline (front-end only), attach (until the coordinator has
// received every subscription), steady (all attached), departure (every
// subscriber closes at once, until the coordinator counts only the
// front-end again and its publications are back to normal), after. For
// each it reports the child's CPU seconds (from /proc), the publications
// the coordinator counted and what the front-end saw, as one JSON object on
// stdout (and in -out). Every phase has a time bound; one that runs out is
// reported as incomplete, not waited for.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"
)

// Config is one run's shape.
type Config struct {
	Subs, Topics  int
	StatsInterval time.Duration
	Baseline      time.Duration
	Steady        time.Duration
	After         time.Duration
	AttachTimeout time.Duration
	DepartTimeout time.Duration
	Label         string
}

// maxTopicsPerPeer is the socket package's fixed limit on one XPUB
// subscriber's distinct topics (see socket.Options.XPubMaxTopics).
const maxTopicsPerPeer = 10000

func defaults(quick bool) Config {
	if quick {
		return Config{Subs: 10, Topics: 100, StatsInterval: 100 * time.Millisecond, Baseline: time.Second,
			Steady: time.Second, After: 2 * time.Second, AttachTimeout: 30 * time.Second, DepartTimeout: 30 * time.Second}
	}
	return Config{Subs: 1000, Topics: 10000, StatsInterval: 100 * time.Millisecond, Baseline: 5 * time.Second,
		Steady: 10 * time.Second, After: 3 * time.Second, AttachTimeout: 150 * time.Second, DepartTimeout: 120 * time.Second}
}

func main() {
	if os.Getenv("FANOUT_ROLE") == "coordinator" {
		if err := runChild(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "fanout coordinator:", err)
			os.Exit(1)
		}
		return
	}
	quick := flag.Bool("quick", false, "10 subscribers x 100 topics, 1 s phases (seconds in all)")
	subs := flag.Int("subs", 0, "subscribers (default 1000; quick 10)")
	topics := flag.Int("topics", 0, "distinct topics per subscriber (default 10000, at most 10000, the socket's per-subscriber limit; quick 100)")
	label := flag.String("label", "", "a name for the run, copied into the result")
	out := flag.String("out", "", "also write the result (JSON) to this file")
	flag.Parse()
	cfg := defaults(*quick)
	if *subs > 0 {
		cfg.Subs = *subs
	}
	if *topics > 0 {
		cfg.Topics = *topics
	}
	cfg.Label = *label
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fanout:", err)
		os.Exit(1)
	}
	res, err := Run(ctx, self, cfg, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fanout:", err)
		os.Exit(1)
	}
	b, _ := json.MarshalIndent(res, "", "  ")
	fmt.Println(string(b))
	if *out != "" {
		if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "fanout:", err)
			os.Exit(1)
		}
	}
}

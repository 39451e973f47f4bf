package hostile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/go-zeromq/zmq4"
)

// ScanConfig configures Scan.
type ScanConfig struct {
	// Probes is the corpus to replay; nil means Corpus(Options).
	Probes []Probe
	// Options tunes the corpus (when Probes is nil) and gives the liveness
	// timeout.
	Options Options
	// Duration is how long to keep replaying the corpus. Every target gets
	// at least one whole pass; zero means exactly one.
	Duration time.Duration
	// OnProbe, if set, is called after each probe and its liveness check,
	// from the target's goroutine (one per target): keep it fast.
	OnProbe func(Event)
}

// Event is one probe delivered to one target and the liveness check after it.
type Event struct {
	Target string
	Probe  *Probe
	// Err is the probe's own error (nil when it was delivered).
	Err error
	// Alive reports whether the target answered a fresh handshake afterwards.
	Alive bool
	// AliveErr says why it did not.
	AliveErr error
}

// Result is the outcome of one probe against one target over a scan.
type Result struct {
	Target string
	Probe  string
	Class  string
	// Sent counts deliveries; Failed the runs that could not deliver the
	// probe (connect or handshake refused).
	Sent, Failed uint64
	// Dead counts the runs after which the target did not answer.
	Dead uint64
	// LastError describes the last failure, if any.
	LastError string
}

// Alive reports whether the target answered after every run of the probe.
func (r Result) Alive() bool { return r.Dead == 0 }

// Report is what Scan found.
type Report struct {
	// Targets are the endpoints scanned, and Types the socket type each
	// announced (empty when it did not answer at the start).
	Targets []string
	Types   []zmq4.SocketType
	// Results holds one entry per (target, probe), in target then corpus order.
	Results []Result
	// Passes counts the complete passes over the corpus per target.
	Passes []int
	// Unreachable holds, per target, why it did not answer at the start of
	// the scan ("" when it did).
	Unreachable []string
	// GaveUp reports, per target, that it failed the liveness check after
	// MaxDeadInARow probes in a row and was not attacked further: it has
	// stopped answering, and more probes would only add their timeouts.
	GaveUp []bool
	// Elapsed is the scan's duration.
	Elapsed time.Duration
}

// MaxDeadInARow is how many probes in a row a target may fail to answer
// after before Scan stops attacking it.
const MaxDeadInARow = 3

// OK reports whether every target answered at the start and after every
// probe.
func (r *Report) OK() bool {
	for _, u := range r.Unreachable {
		if u != "" {
			return false
		}
	}
	for _, res := range r.Results {
		if !res.Alive() {
			return false
		}
	}
	return true
}

// Sent returns the number of probes delivered in all.
func (r *Report) Sent() uint64 {
	var n uint64
	for _, res := range r.Results {
		n += res.Sent
	}
	return n
}

// Scan replays the corpus at every target (in parallel across targets, in
// corpus order per target) for cfg.Duration, checking after each probe that
// the target still completes a ZMTP handshake. Every target gets one whole
// pass; after it, the duration is checked after each probe. A target that
// does not answer after MaxDeadInARow probes in a row is not attacked
// further (Report.GaveUp), so a wedged target costs a few timeouts, not a
// pass of them. Scan returns when every target is done, or when ctx ends
// (the report then covers what ran). A target that does not answer at the start is reported as
// unreachable and not attacked. The error is non-nil only for an endpoint that
// does not parse.
func Scan(ctx context.Context, targets []string, cfg ScanConfig) (*Report, error) {
	for _, t := range targets {
		if _, _, err := SplitEndpoint(t); err != nil {
			return nil, err
		}
	}
	o := cfg.Options.withDefaults()
	probes := cfg.Probes
	if probes == nil {
		probes = Corpus(o)
	}
	start := time.Now()
	rep := &Report{
		Targets:     append([]string(nil), targets...),
		Types:       make([]zmq4.SocketType, len(targets)),
		Results:     make([]Result, len(targets)*len(probes)),
		Passes:      make([]int, len(targets)),
		Unreachable: make([]string, len(targets)),
		GaveUp:      make([]bool, len(targets)),
	}
	var wg sync.WaitGroup
	for ti, target := range targets {
		res := rep.Results[ti*len(probes) : (ti+1)*len(probes)]
		for pi := range probes {
			res[pi] = Result{Target: target, Probe: probes[pi].Name, Class: probes[pi].Class}
		}
		wg.Go(func() {
			peer, err := Discover(ctx, target, o.Timeout)
			if err != nil {
				rep.Unreachable[ti] = err.Error()
				return
			}
			rep.Types[ti] = peer
			deadInARow := 0
			for {
				for pi := range probes {
					p := &probes[pi]
					perr := p.Run(ctx, target)
					if ctx.Err() != nil {
						return
					}
					ev := Event{Target: target, Probe: p, Err: perr}
					if perr != nil && !errors.Is(perr, ErrWedged) {
						res[pi].Failed++
						res[pi].LastError = perr.Error()
					} else {
						res[pi].Sent++
					}
					aerr := Alive(ctx, target, peer, o.Timeout)
					if ctx.Err() != nil {
						return
					}
					if errors.Is(perr, ErrWedged) && aerr == nil {
						aerr = perr
					}
					ev.Alive, ev.AliveErr = aerr == nil, aerr
					if aerr != nil {
						res[pi].Dead++
						res[pi].LastError = aerr.Error()
						deadInARow++
					} else {
						deadInARow = 0
					}
					if cfg.OnProbe != nil {
						cfg.OnProbe(ev)
					}
					if deadInARow >= MaxDeadInARow {
						rep.GaveUp[ti] = true
						return
					}
					// After the first whole pass the duration is checked
					// between probes, not only between passes.
					if rep.Passes[ti] > 0 && time.Since(start) >= cfg.Duration {
						return
					}
				}
				rep.Passes[ti]++
				if time.Since(start) >= cfg.Duration {
					return
				}
			}
		})
	}
	wg.Wait()
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// WriteTable writes the report as a table: one line per target and probe
// with its class, how often it was sent (and failed to be delivered), and
// whether the target still answered afterwards; then one line per target.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tPROBE\tCLASS\tSENT\tALIVE AFTER")
	unreachable := map[string]bool{}
	for i, t := range r.Targets {
		if r.Unreachable[i] != "" {
			unreachable[t] = true
			fmt.Fprintf(tw, "%s\t(none)\t-\t0\tNO: did not answer at the start, not scanned\n", t)
		}
	}
	for _, res := range r.Results {
		if unreachable[res.Target] || res.Sent+res.Failed == 0 && res.Dead == 0 {
			continue // not attacked: no verdict to give
		}
		sent := fmt.Sprint(res.Sent)
		if res.Failed > 0 {
			sent += fmt.Sprintf(" (%d not delivered)", res.Failed)
		}
		alive := "yes"
		if !res.Alive() {
			alive = fmt.Sprintf("NO (%d times)", res.Dead)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", res.Target, res.Probe, res.Class, sent, alive)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var b strings.Builder
	for i, t := range r.Targets {
		switch {
		case r.Unreachable[i] != "":
			fmt.Fprintf(&b, "%s: did not answer at the start: %s\n", t, r.Unreachable[i])
		default:
			dead := 0
			for _, res := range r.Results {
				if res.Target == t && !res.Alive() {
					dead++
				}
			}
			verdict := "still answering"
			switch {
			case dead == 1:
				verdict = "STOPPED ANSWERING after 1 probe"
			case dead > 1:
				verdict = fmt.Sprintf("STOPPED ANSWERING after %d probes", dead)
			}
			if r.GaveUp[i] {
				verdict += fmt.Sprintf(" (%d in a row: not attacked further)", MaxDeadInARow)
			}
			fmt.Fprintf(&b, "%s (%s): %d pass(es) over the corpus, %s\n", t, r.Types[i], r.Passes[i], verdict)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

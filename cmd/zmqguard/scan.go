package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/hostile"
)

var scanSpec = commandSpec{
	name:     "scan",
	synopsis: "ADDR... [--duration 5s] [--json]",
	args:     true,
	summary:  "replay the built-in hostile corpus at your own services",
	help: `Replays zmqguard's built-in hostile corpus at every ADDR, in parallel, for the
duration (at least one whole pass): transport probes (idle and half-open
connections, HTTP, TLS, random bytes, ZMTP 1.0/2.0 greetings, PLAIN/CURVE,
malformed READY, a PING, frame headers claiming 2^40 and 2^62 bytes, a burst
of 100 connect/close), envelope probes (no delimiter, 3 and 70 frames) and
payload hazards (invalid UTF-8, a map keyed by a map, 20,000-deep nesting, an
array claiming 2^32-1 elements, a bare int, an empty frame, 1 MiB + 1 byte),
each in the form the target's announced socket type expects.

After every probe it checks that the target still completes a fresh ZMTP
handshake, and prints a table on stdout: probe, class, times sent, whether the
target answered afterwards (with --json, one JSON object instead). A target
that does not answer at the start is not scanned; one that stops answering
after three probes in a row is not attacked further, so a wedged target ends
the scan within a few --timeout periods. Exits 1 if any target stopped
answering (or did not answer at the start).

This attacks the services it is pointed at: point it only at your own. It
refuses addresses that are not loopback or this host's own unless
--allow-remote is given.`,
}

// scanFlags are the flags of scan.
type scanFlags struct {
	duration    time.Duration
	hold        time.Duration
	timeout     time.Duration
	allowRemote bool
	asJSON      bool
}

// scanCmd is the scan command.
var scanCmd = command[scanFlags]{
	spec: scanSpec,
	register: func(fs *flag.FlagSet, fl *scanFlags) {
		fs.DurationVar(&fl.duration, "duration", 5*time.Second, "how long to keep replaying the corpus (at least one pass)")
		fs.DurationVar(&fl.hold, "hold", hostile.DefaultHold, "how long stalled connections are held (keep it below the target's handshake timeout)")
		fs.DurationVar(&fl.timeout, "timeout", hostile.DefaultTimeout, "bound on each connect, handshake and liveness check")
		fs.BoolVar(&fl.allowRemote, "allow-remote", false, "allow targets that are not loopback or this host's own addresses (only hosts you run)")
		fs.BoolVar(&fl.asJSON, "json", false, "print the report as one JSON object instead of a table")
	},
	run: runScan,
}

// runScan is the run function of scan: it checks the flags and
// the arguments (e.args), then does the work.
func runScan(ctx context.Context, fl *scanFlags, e *env) error {
	if len(e.args) == 0 {
		return usagef("want at least one ADDR")
	}
	if fl.duration < 0 {
		return badFlag("--duration", fl.duration, "must not be negative")
	}
	if fl.hold <= 0 {
		return badFlag("--hold", fl.hold, "want a positive duration")
	}
	if fl.timeout <= 0 {
		return badFlag("--timeout", fl.timeout, "want a positive duration")
	}
	for _, t := range e.args {
		if _, _, err := hostile.SplitEndpoint(t); err != nil {
			return usagef("%v", err)
		}
		if !fl.allowRemote {
			if err := checkOwnAddress(ctx, t); err != nil {
				return err
			}
		}
	}
	e.logger.Info("scanning", "targets", e.args, "duration", fl.duration)
	rep, err := hostile.Scan(ctx, e.args, hostile.ScanConfig{
		Options:  hostile.Options{Hold: fl.hold, Timeout: fl.timeout},
		Duration: fl.duration,
		OnProbe: func(ev hostile.Event) {
			if !ev.Alive {
				e.logger.Warn("target stopped answering", "target", ev.Target, "probe", ev.Probe.Name, "err", ev.AliveErr)
			}
		},
	})
	if err != nil {
		return usagef("%v", err)
	}
	if fl.asJSON {
		err = writeScanJSON(e.stdout, rep)
	} else {
		err = rep.WriteTable(e.stdout)
	}
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return errors.New("interrupted")
	}
	if !rep.OK() {
		return errors.New("a target did not answer at the start or stopped answering (see the report)")
	}
	e.logger.Info("scan done", "probes_sent", rep.Sent(), "elapsed", rep.Elapsed.Round(time.Millisecond))
	return nil
}

// scanJSON is the --json form of a scan report.
type scanJSON struct {
	OK      bool             `json:"ok"`
	Elapsed string           `json:"elapsed"`
	Sent    uint64           `json:"probes_sent"`
	Targets []scanTargetJSON `json:"targets"`
}

type scanTargetJSON struct {
	Target string `json:"target"`
	// SocketType is what the target announced; "" when it did not answer
	// at the start (Unreachable says why).
	SocketType  string          `json:"socket_type"`
	Unreachable string          `json:"unreachable,omitempty"`
	Passes      int             `json:"passes"`
	Answering   bool            `json:"answering"`
	GaveUp      bool            `json:"gave_up"`
	Probes      []scanProbeJSON `json:"probes"`
}

type scanProbeJSON struct {
	Probe     string `json:"probe"`
	Class     string `json:"class"`
	Sent      uint64 `json:"sent"`
	Failed    uint64 `json:"not_delivered"`
	Dead      uint64 `json:"not_answering_after"`
	LastError string `json:"last_error,omitempty"`
}

// writeScanJSON writes rep as one JSON line. Only probes that ran are
// listed; a target that did not answer at the start has none.
func writeScanJSON(w io.Writer, rep *hostile.Report) error {
	out := scanJSON{OK: rep.OK(), Elapsed: rep.Elapsed.Round(time.Millisecond).String(), Sent: rep.Sent()}
	for i, t := range rep.Targets {
		tj := scanTargetJSON{Target: t, SocketType: string(rep.Types[i]), Unreachable: rep.Unreachable[i],
			Passes: rep.Passes[i], Answering: rep.Unreachable[i] == "", GaveUp: rep.GaveUp[i], Probes: []scanProbeJSON{}}
		for _, r := range rep.Results {
			if r.Target != t || rep.Unreachable[i] != "" || r.Sent+r.Failed == 0 && r.Dead == 0 {
				continue
			}
			if r.Dead > 0 {
				tj.Answering = false
			}
			tj.Probes = append(tj.Probes, scanProbeJSON{Probe: r.Probe, Class: r.Class, Sent: r.Sent, Failed: r.Failed,
				Dead: r.Dead, LastError: r.LastError})
		}
		out.Targets = append(out.Targets, tj)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// checkOwnAddress refuses a tcp endpoint whose host is neither loopback nor
// one of this host's interface addresses (a name must resolve to such
// addresses only). ipc endpoints are local by nature.
func checkOwnAddress(ctx context.Context, ep string) error {
	network, address, _ := hostile.SplitEndpoint(ep)
	if network != "tcp" {
		return nil
	}
	host, _, _ := net.SplitHostPort(address)
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a.Unmap()}
	} else {
		ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return fmt.Errorf("resolving %s: %w", host, err)
		}
		for _, a := range ips {
			addrs = append(addrs, a.Unmap())
		}
	}
	own := map[netip.Addr]bool{}
	if ifs, err := net.InterfaceAddrs(); err == nil {
		for _, ia := range ifs {
			if p, err := netip.ParsePrefix(ia.String()); err == nil {
				own[p.Addr().Unmap()] = true
			}
		}
	}
	for _, a := range addrs {
		if !a.IsLoopback() && !own[a] {
			return usagef("%s is not a loopback or local address: scan only services you run (--allow-remote to override)", ep)
		}
	}
	return nil
}

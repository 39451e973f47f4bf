package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvevents/discovery"
)

// defaultDNSInterval is --dns-interval's default.
const defaultDNSInterval = 10 * time.Second

// discoveryFlags are kv-events' and kv-index's discovery flags (issue 36):
// --sources-dns (repeatable), --dns-interval, --sources-file.
type discoveryFlags struct {
	dns      dnsFlag
	interval time.Duration
	file     string
}

func addDiscoveryFlags(fs *flag.FlagSet) *discoveryFlags {
	d := &discoveryFlags{}
	fs.Var(&d.dns, "sources-dns", "`tcp://NAME:PORT[,replay=PORT]`: follow every address NAME resolves to (A and AAAA, re-resolved every --dns-interval; a Kubernetes headless service lists its ready pods); an engine that leaves the answer is retired (repeatable)")
	fs.DurationVar(&d.interval, "dns-interval", defaultDNSInterval, "how often --sources-dns names are resolved")
	fs.StringVar(&d.file, "sources-file", "", "follow the engines listed in this `file`, one 'LIVE [REPLAY]' per line (# comments), re-read when it changes (also when replaced by a rename); an engine taken out is retired")
	return d
}

// dnsFlag is --sources-dns, repeatable.
type dnsFlag []discovery.DNS

func (f *dnsFlag) String() string { return "" }

func (f *dnsFlag) Set(s string) error {
	d, err := parseDNSFlag(s)
	if err != nil {
		return err
	}
	*f = append(*f, d)
	return nil
}

// parseDNSFlag parses tcp://NAME:PORT[,replay=PORT].
func parseDNSFlag(s string) (discovery.DNS, error) {
	var d discovery.DNS
	rest, ok := strings.CutPrefix(s, "tcp://")
	if !ok {
		return d, errors.New("want tcp://NAME:PORT[,replay=PORT]")
	}
	ep, opts, _ := strings.Cut(rest, ",")
	host, port, err := net.SplitHostPort(ep)
	if err != nil || host == "" || host == "*" {
		return d, errors.New("want tcp://NAME:PORT[,replay=PORT] with a name to resolve")
	}
	for i := 0; i < len(host); i++ {
		if c := host[i]; c <= ' ' || c > '~' {
			return d, errors.New("the name holds a byte outside printable ASCII")
		}
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return d, fmt.Errorf("port %q: want 1..65535", port)
	}
	d.Host, d.Port = host, p
	if opts != "" {
		v, ok := strings.CutPrefix(opts, "replay=")
		if !ok {
			return d, fmt.Errorf("option %q: want replay=PORT", opts)
		}
		r, err := strconv.Atoi(v)
		if err != nil || r < 1 || r > 65535 {
			return d, fmt.Errorf("replay port %q: want 1..65535", v)
		}
		d.ReplayPort = r
	}
	return d, nil
}

// any reports whether a discovery flag names sources.
func (d *discoveryFlags) any() bool { return len(d.dns) > 0 || d.file != "" }

func (d *discoveryFlags) check() error {
	if d.interval <= 0 {
		return badFlag("--dns-interval", d.interval, "want a positive duration")
	}
	return nil
}

// discoverers returns the discoverers of the flags, each source given
// engine (the --engine before every source) and, with resume, the
// position resume returns for its name (kv-index's snapshot or Redis).
func (d *discoveryFlags) discoverers(logger *slog.Logger, engine string, resume func() map[string]kvevents.Position) []discovery.Discoverer {
	var out []discovery.Discoverer
	for _, dn := range d.dns {
		dn.Interval, dn.Logger, dn.Engine = d.interval, logger, engine
		out = append(out, dn)
	}
	if d.file != "" {
		out = append(out, fillSources{d: discovery.File{Path: d.file, Logger: logger}, engine: engine, resume: resume})
	}
	if resume != nil {
		for i, dd := range out {
			if _, ok := dd.(fillSources); !ok {
				out[i] = fillSources{d: dd, resume: resume}
			}
		}
	}
	return out
}

// fillSources gives every source of d's sets a default engine and a
// Resume position.
type fillSources struct {
	d      discovery.Discoverer
	engine string
	resume func() map[string]kvevents.Position
}

func (f fillSources) Discover(ctx context.Context, sets chan<- []kvevents.Source) error {
	in := make(chan []kvevents.Source)
	errc := make(chan error, 1)
	go func() { errc <- f.d.Discover(ctx, in) }()
	for {
		select {
		case err := <-errc:
			return err
		case set := <-in:
			var pos map[string]kvevents.Position
			if f.resume != nil {
				pos = f.resume()
			}
			for i := range set {
				if set[i].Engine == "" {
					set[i].Engine = f.engine
				}
				name := set[i].Name
				if name == "" {
					name = set[i].Live
				}
				if p, ok := pos[name]; ok {
					set[i].Resume = &p
				}
			}
			select {
			case sets <- set:
			case <-ctx.Done():
			}
		}
	}
}

// followDiscovery runs discovery.Follow for the flags until ctx ends; a
// discoverer's failure is logged and ends the command through stop. The
// returned wait waits for it and returns that failure.
func followDiscovery(ctx context.Context, sub *kvevents.Subscriber, ds []discovery.Discoverer, logger *slog.Logger, stop func()) (wait func() error) {
	if len(ds) == 0 {
		return func() error { return nil }
	}
	var wg sync.WaitGroup
	var err error
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err = discovery.Follow(ctx, sub, ds...); err != nil && !errors.Is(err, kvevents.ErrClosed) {
			logger.Error("source discovery failed", "err", err)
			stop()
		}
	}()
	return func() error {
		wg.Wait()
		if errors.Is(err, kvevents.ErrClosed) {
			return nil
		}
		return err
	}
}

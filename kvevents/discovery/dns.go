package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
	"github.com/zmqguard/zmqguard/kvevents"
)

// DNS discovers engines as the addresses a name resolves to (A and AAAA
// records), re-resolved every Interval: a Kubernetes headless service
// answers with the addresses of its ready pods, so following it needs
// neither API access nor RBAC. Every address is one source, Live
// tcp://ADDR:Port (and Replay tcp://ADDR:ReplayPort when ReplayPort is
// set), named by its Live endpoint; an address that leaves the answer is
// retired.
//
// The rules for answers that are not a list of addresses:
//   - a lookup that fails (a timeout, SERVFAIL, a refused or unreachable
//     server, a malformed answer) changes nothing: the previous set stays
//     and the failure is logged (once, then once when lookups work again);
//   - a name that does not exist (NXDOMAIN) or has no address (an empty
//     answer; a headless service with no ready pod) retires every engine
//     only once EmptyRounds lookups in a row answered so: one bad answer
//     never retires the fleet;
//   - A and AAAA are asked separately: an empty answer for one family and
//     addresses for the other is the other's addresses (a failure of
//     either is a failed lookup).
type DNS struct {
	// Host is the name to resolve, e.g. vllm-engines.ns.svc.cluster.local
	// (a trailing dot makes it absolute: no search domain is tried).
	Host string
	// Port is every engine's live port (vLLM's KVEventsConfig.endpoint,
	// 5557 by default); ReplayPort the replay port (0: no replay endpoint).
	Port, ReplayPort int
	// Engine is every source's kvevents.Source.Engine ("" is vLLM).
	Engine string
	// Interval is how often the name is resolved; a lookup is bounded by
	// it too (at most 5 s). Zero means 10 s.
	Interval time.Duration
	// EmptyRounds is how many lookups in a row must answer NXDOMAIN or no
	// address before every engine is retired. Zero means 3.
	EmptyRounds int
	// Resolver resolves Host; nil means net.DefaultResolver. A test or a
	// program with its own DNS server sets one with PreferGo and a Dial
	// to it.
	Resolver *net.Resolver
	// Logger receives the lookup failures; nil means slog.Default().
	Logger *slog.Logger
}

// defaultDNSInterval is DNS.Interval's default.
const defaultDNSInterval = 10 * time.Second

// maxLookup bounds one lookup whatever the interval.
const maxLookup = 5 * time.Second

// maxAddrs bounds the addresses one lookup may add (a hostile or broken
// server cannot make the subscriber dial millions of peers).
const maxAddrs = 4096

func (d *DNS) check() error {
	if d.Host == "" {
		return errors.New("discovery: DNS.Host is empty")
	}
	if d.Port < 1 || d.Port > 65535 {
		return fmt.Errorf("discovery: DNS.Port %d out of range 1..65535", d.Port)
	}
	if d.ReplayPort < 0 || d.ReplayPort > 65535 {
		return fmt.Errorf("discovery: DNS.ReplayPort %d out of range 0..65535", d.ReplayPort)
	}
	if d.Interval < 0 {
		return fmt.Errorf("discovery: DNS.Interval %v is negative", d.Interval)
	}
	if d.EmptyRounds < 0 {
		return fmt.Errorf("discovery: DNS.EmptyRounds %d is negative", d.EmptyRounds)
	}
	return nil
}

// Discover resolves Host at once and every Interval, and sends the
// sources of each answer that changes the set (see DNS for the rules). It
// returns nil when ctx ends, or at once an error naming a bad field.
func (d DNS) Discover(ctx context.Context, sets chan<- []kvevents.Source) error {
	if err := d.check(); err != nil {
		return err
	}
	interval := d.Interval
	if interval == 0 {
		interval = defaultDNSInterval
	}
	rounds := d.EmptyRounds
	if rounds == 0 {
		rounds = 3
	}
	log := d.Logger
	if log == nil {
		log = slog.Default()
	}
	host := ratelog.Escape(d.Host, 256)
	var (
		sent     []netip.Addr
		haveSent bool
		empties  int
		failures int
	)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		addrs, err := d.lookup(ctx, min(interval, maxLookup))
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			if failures == 0 {
				log.Warn("discovery: DNS lookup failed; the engines found before stay followed", "host", host,
					"err", ratelog.Escape(err.Error(), 512))
			}
			failures++
		default:
			if failures > 0 {
				log.Info("discovery: DNS lookups work again", "host", host, "failed_lookups", failures)
				failures = 0
			}
			if len(addrs) == 0 {
				empties++
				if empties < rounds && haveSent {
					if empties == 1 {
						log.Warn("discovery: DNS answered no address; the engines stay followed unless the answer persists",
							"host", host, "rounds", rounds)
					}
					break
				}
			} else {
				empties = 0
			}
			if haveSent && slices.Equal(addrs, sent) {
				break
			}
			if len(addrs) == 0 && haveSent && len(sent) > 0 {
				log.Warn("discovery: DNS answered no address for several lookups in a row; every engine is retired",
					"host", host, "rounds", rounds)
			}
			select {
			case sets <- d.sources(addrs):
				sent, haveSent = addrs, true
			case <-ctx.Done():
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// lookup resolves A and AAAA separately; a name not found (or without
// records of a family) is an empty answer for it, any other failure an
// error. The result is sorted and deduplicated.
func (d *DNS) lookup(ctx context.Context, timeout time.Duration) ([]netip.Addr, error) {
	r := d.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var all []netip.Addr
	for _, network := range []string{"ip4", "ip6"} {
		addrs, err := r.LookupNetIP(ctx, network, d.Host)
		var de *net.DNSError
		var ae *net.AddrError
		if errors.As(err, &de) && de.IsNotFound || errors.As(err, &ae) {
			// No such name, or none of this family (the hosts file's
			// answer filtered by family is an AddrError).
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, a := range addrs {
			a = a.Unmap()
			if (network == "ip4") != a.Is4() || !a.IsValid() {
				continue
			}
			all = append(all, a.WithZone(""))
		}
		if len(all) > maxAddrs {
			return nil, fmt.Errorf("more than %d addresses", maxAddrs)
		}
	}
	slices.SortFunc(all, func(a, b netip.Addr) int { return a.Compare(b) })
	return slices.Compact(all), nil
}

// sources turns addresses into sources.
func (d *DNS) sources(addrs []netip.Addr) []kvevents.Source {
	out := make([]kvevents.Source, 0, len(addrs))
	for _, a := range addrs {
		s := kvevents.Source{Live: "tcp://" + net.JoinHostPort(a.String(), strconv.Itoa(d.Port)), Engine: d.Engine}
		if d.ReplayPort != 0 {
			s.Replay = "tcp://" + net.JoinHostPort(a.String(), strconv.Itoa(d.ReplayPort))
		}
		s.Name = s.Live
		out = append(out, s)
	}
	return out
}

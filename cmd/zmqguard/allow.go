package main

import (
	"flag"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/zmqguard/zmqguard/zmtpguard"
)

// allowFlag is the --allow flag of every listening command: the source
// addresses whose connections are admitted (zmtpguard.Config.Allow), as a
// comma-separated list of CIDR prefixes or single IP addresses
// (10.0.0.0/8,192.168.1.7,fd00::/8). It may be repeated; the lists add up.
// Empty (the default) admits every address.
//
// Its companions, registered with it, are --reserve (connections held for
// trusted networks, zmtpguard.Config.Reserve) and --ipv6-host-prefix (how
// IPv6 sources group into hosts, zmtpguard.Config.IPv6HostPrefix).
type allowFlag struct {
	prefixes []netip.Prefix
	reserve  reserveFlag
	v6bits   int
}

// addAllowFlag registers --allow, --reserve and --ipv6-host-prefix on fs.
func addAllowFlag(fs *flag.FlagSet) *allowFlag {
	a := &allowFlag{}
	fs.Var(a, "allow", "admit connections only from these source addresses: comma-separated `CIDR`s or IPs, e.g. 10.0.0.0/8,127.0.0.1 (repeatable; default: any; unix-socket peers never match)")
	fs.Var(&a.reserve, "reserve", "hold up to N connections of each listener for a trusted network, against every other host's claim: `CIDR=N` (or IP=N), comma-separated, repeatable, e.g. 10.1.0.0/16=32")
	fs.IntVar(&a.v6bits, "ipv6-host-prefix", 64, "IPv6 source addresses sharing this many leading `bits` count as one host for the per-host shares of the listeners (IPv4: each address)")
	return a
}

// apply sets c's allowlist, reservations and IPv6 host grouping.
func (a *allowFlag) apply(c *zmtpguard.Config) {
	c.Allow = a.prefixes
	if len(a.reserve) > 0 {
		c.Reserve = a.reserve
	}
	c.IPv6HostPrefix = a.v6bits
}

// reserveFlag is --reserve: CIDR=N pairs (zmtpguard.Config.Reserve).
type reserveFlag map[netip.Prefix]int

func (r *reserveFlag) String() string {
	if r == nil || len(*r) == 0 {
		return ""
	}
	s := make([]string, 0, len(*r))
	for p, n := range *r {
		s = append(s, p.String()+"="+strconv.Itoa(n))
	}
	sort.Strings(s)
	return strings.Join(s, ",")
}

func (r *reserveFlag) Set(v string) error {
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		cidr, count, ok := strings.Cut(f, "=")
		if !ok {
			return fmt.Errorf("%q is not CIDR=N (e.g. 10.0.0.0/8=16)", f)
		}
		p, err := parseAllow(strings.TrimSpace(cidr))
		if err != nil {
			return err
		}
		n, err := strconv.Atoi(strings.TrimSpace(count))
		if err != nil || n <= 0 {
			return fmt.Errorf("%q: the count %q is not a positive number", f, count)
		}
		if *r == nil {
			*r = make(reserveFlag)
		}
		(*r)[p] += n
	}
	return nil
}

func (a *allowFlag) String() string {
	if a == nil {
		return ""
	}
	s := make([]string, len(a.prefixes))
	for i, p := range a.prefixes {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

func (a *allowFlag) Set(v string) error {
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := parseAllow(f)
		if err != nil {
			return err
		}
		a.prefixes = append(a.prefixes, p)
	}
	return nil
}

// parseAllow reads one CIDR prefix or IP address (a /32 or /128 prefix).
func parseAllow(f string) (netip.Prefix, error) {
	if strings.Contains(f, "/") {
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR prefix (e.g. 10.0.0.0/8)", f)
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			// An IPv4-mapped prefix is its IPv4 prefix (peers' addresses
			// are unmapped before matching); a shorter one stays IPv6 and
			// never matches an IPv4 peer (never wider than written).
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		return p.Masked(), nil
	}
	ip, err := netip.ParseAddr(f)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an IP address or CIDR prefix", f)
	}
	ip = ip.Unmap().WithZone("")
	return netip.PrefixFrom(ip, ip.BitLen()), nil
}

// allows reports whether addr passes the list (an empty list allows all;
// an address without an IP, a unix-socket peer, never matches a list).
func (a *allowFlag) allows(addr net.Addr) bool {
	if a == nil || len(a.prefixes) == 0 {
		return true
	}
	ta, ok := addr.(*net.TCPAddr)
	if !ok {
		return false
	}
	ip := ta.AddrPort().Addr().Unmap()
	for _, p := range a.prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

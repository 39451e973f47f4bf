package main

import (
	"flag"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// allowFlag is the --allow flag of every listening command: the source
// addresses whose connections are admitted (zmtpguard.Config.Allow), as a
// comma-separated list of CIDR prefixes or single IP addresses
// (10.0.0.0/8,192.168.1.7,fd00::/8). It may be repeated; the lists add up.
// Empty (the default) admits every address.
type allowFlag struct {
	prefixes []netip.Prefix
}

// addAllowFlag registers --allow on fs.
func addAllowFlag(fs *flag.FlagSet) *allowFlag {
	a := &allowFlag{}
	fs.Var(a, "allow", "admit connections only from these source addresses: comma-separated `CIDR`s or IPs, e.g. 10.0.0.0/8,127.0.0.1 (repeatable; default: any; unix-socket peers never match)")
	return a
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

// Package netproof builds several "hosts" on one Linux machine, each a
// network namespace with its own address on a private bridge, so that
// liveness rules (heartbeats, reconnects, ROUTER handover) can be proven
// against real TCP stacks: a silent partition drops every packet of a host
// with iptables (no FIN, no RST), random loss uses iptables' statistic
// match. It needs root, ip(8) from iproute2 and iptables; [New] fails the
// test under CI (CI set in the environment) when namespaces cannot be made,
// and skips it loudly elsewhere.
//
// Latency is not emulated by this package (tc netem is not available on
// every CI kernel): its tests put a delaying TCP relay between the hosts
// instead.
//
// Every name it creates carries the test process's pid, every address lies
// in 10.251.0.0/24 inside namespaces it creates, and everything is deleted
// in t.Cleanup, on failure too.
package netproof

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/missingpeer"
)

// Subnet is the private /24 every host address lies in.
const Subnet = "10.251.0."

// Net is one set of namespaces: a hub holding a bridge, and hosts each
// linked to it by a veth pair.
type Net struct {
	t      testing.TB
	prefix string
	hub    string

	mu    sync.Mutex
	hosts map[string]*Host
}

// Host is one namespace with one address.
type Host struct {
	n *Net
	// Name is the host's short name given to AddHost.
	Name string
	// NS is the network namespace's name.
	NS string
	// Addr is the host's IPv4 address.
	Addr string

	mu    sync.Mutex
	rules [][]string // iptables rules in force, for Heal and cleanup
}

// run executes a command with a bound on its time and returns its error
// with its output.
func run(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// unavailable fails (CI) or skips (elsewhere) the test.
func unavailable(t testing.TB, why string) {
	t.Helper()
	missingpeer.Skip(t, "network namespaces unavailable: "+why+" (netproof needs root, iproute2 and iptables)", "iproute2", "iptables")
}

var seq struct {
	sync.Mutex
	n int
}

// New creates the hub namespace and its bridge. Hosts are added with
// AddHost. Everything is removed when the test ends.
func New(t testing.TB) *Net {
	t.Helper()
	if os.Geteuid() != 0 {
		unavailable(t, "not running as root")
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			unavailable(t, tool+" not found")
		}
	}
	seq.Lock()
	seq.n++
	k := seq.n
	seq.Unlock()
	n := &Net{t: t, prefix: "zgnp" + strconv.Itoa(os.Getpid()) + "-" + strconv.Itoa(k), hosts: map[string]*Host{}}
	n.hub = n.prefix + "-hub"
	if err := run("ip", "netns", "add", n.hub); err != nil {
		unavailable(t, err.Error())
	}
	t.Cleanup(n.destroy)
	for _, c := range [][]string{
		{"ip", "-n", n.hub, "link", "add", "br0", "type", "bridge"},
		{"ip", "-n", n.hub, "link", "set", "br0", "up"},
		{"ip", "-n", n.hub, "link", "set", "lo", "up"},
	} {
		if err := run(c...); err != nil {
			unavailable(t, err.Error())
		}
	}
	return n
}

// AddHost creates a namespace named after name, links it to the bridge and
// gives it the address Subnet+strconv.Itoa(octet).
func (n *Net) AddHost(name string, octet int) *Host {
	n.t.Helper()
	h := &Host{n: n, Name: name, NS: n.prefix + "-" + name, Addr: Subnet + strconv.Itoa(octet)}
	n.mu.Lock()
	n.hosts[name] = h
	n.mu.Unlock()
	dev := "vh" + strconv.Itoa(octet)
	for _, c := range [][]string{
		{"ip", "netns", "add", h.NS},
		{"ip", "-n", n.hub, "link", "add", dev, "type", "veth", "peer", "name", "eth0", "netns", h.NS},
		{"ip", "-n", n.hub, "link", "set", dev, "master", "br0", "up"},
		{"ip", "-n", h.NS, "addr", "add", h.Addr + "/24", "dev", "eth0"},
		{"ip", "-n", h.NS, "link", "set", "eth0", "up"},
		{"ip", "-n", h.NS, "link", "set", "lo", "up"},
	} {
		if err := run(c...); err != nil {
			n.t.Fatal(err)
		}
	}
	return h
}

// destroy deletes every namespace (their veths go with them).
func (n *Net) destroy() {
	n.mu.Lock()
	hosts := n.hosts
	n.mu.Unlock()
	for _, h := range hosts {
		if err := run("ip", "netns", "del", h.NS); err != nil {
			n.t.Logf("cleanup: %v", err)
		}
	}
	if err := run("ip", "netns", "del", n.hub); err != nil {
		n.t.Logf("cleanup: %v", err)
	}
}

// Command returns a command that runs argv inside h's namespace.
func (h *Host) Command(ctx context.Context, argv ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.NS}, argv...)...)
}

func (h *Host) iptables(op string, rule []string) error {
	return run(append([]string{"ip", "netns", "exec", h.NS, "iptables", "-w", op}, rule...)...)
}

func (h *Host) add(rule ...string) {
	h.n.t.Helper()
	if err := h.iptables("-A", rule); err != nil {
		h.n.t.Fatal(err)
	}
	h.mu.Lock()
	h.rules = append(h.rules, rule)
	h.mu.Unlock()
}

// Partition drops every packet into and out of h's link, silently: no FIN,
// no RST, no ICMP reaches anyone, as for a host that vanished or a cut
// cable. Heal lifts it.
func (h *Host) Partition() {
	h.n.t.Helper()
	h.add("INPUT", "-i", "eth0", "-j", "DROP")
	h.add("OUTPUT", "-o", "eth0", "-j", "DROP")
}

// Loss drops each packet entering h's link at random with probability p.
func (h *Host) Loss(p float64) {
	h.n.t.Helper()
	h.add("INPUT", "-i", "eth0", "-m", "statistic", "--mode", "random", "--probability", strconv.FormatFloat(p, 'f', 4, 64), "-j", "DROP")
}

// Heal removes every rule Partition and Loss added.
func (h *Host) Heal() {
	h.n.t.Helper()
	h.mu.Lock()
	rules := h.rules
	h.rules = nil
	h.mu.Unlock()
	for _, r := range rules {
		if err := h.iptables("-D", r); err != nil {
			h.n.t.Fatal(err)
		}
	}
}

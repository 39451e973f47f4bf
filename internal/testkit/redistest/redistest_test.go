package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain stops the test's servers and exits with the tests' code (a
// goleak.Cleanup function that does not exit would turn a leak into a pass).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) { Stop(); os.Exit(code) }))
}

func TestStartPingClose(t *testing.T) {
	s := Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ping(ctx, s.Socket()); err != nil {
		t.Fatal(err)
	}
	if Require(t) != s {
		t.Fatal("Require started a second server")
	}
	if a, b := Prefix(t), Prefix(t); a == b {
		t.Fatalf("two prefixes equal: %q", a)
	}
	// A private server of its own dies with Close.
	s2, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
	if err := ping(ctx, s2.Socket()); err == nil {
		t.Fatal("server still answers after Close")
	}
}

// roundTrip sends one RESP command to the server and returns its reply's
// first line.
func roundTrip(t *testing.T, sock string, args ...string) string {
	t.Helper()
	c, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	req := fmt.Sprintf("*%d\r\n", len(args))
	for _, a := range args {
		req += fmt.Sprintf("$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return line
}

// TestRestartComesBackEmpty: Restart serves the same socket again, with
// none of the data written before.
func TestRestartComesBackEmpty(t *testing.T) {
	s, err := Start()
	if err != nil {
		unavailable(t, err)
	}
	defer s.Close()
	if got := roundTrip(t, s.Socket(), "SET", "k", "v"); got != "+OK\r\n" {
		t.Fatalf("SET answered %q", got)
	}
	if got := roundTrip(t, s.Socket(), "EXISTS", "k"); got != ":1\r\n" {
		t.Fatalf("EXISTS before the restart answered %q", got)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if got := roundTrip(t, s.Socket(), "EXISTS", "k"); got != ":0\r\n" {
		t.Fatalf("EXISTS after the restart answered %q, want :0 (empty)", got)
	}
}

// recorder is a testing.TB that records Skip and Fatal instead of ending
// the test.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()                   {}
func (r *recorder) Name() string              { return "TestX" }
func (r *recorder) Skip(a ...any)             { r.skipped = fmt.Sprint(a...) }
func (r *recorder) Fatal(a ...any)            { r.failed = fmt.Sprint(a...) }
func (r *recorder) Fatalf(f string, a ...any) { r.failed = fmt.Sprintf(f, a...) }

// TestUnavailable: a redis-server that is installed but did not start
// fails the test (a broken or overloaded machine is not a missing peer);
// without one the skip carries the missingpeer marker.
func TestUnavailable(t *testing.T) {
	t.Setenv("CI", "")
	r := &recorder{TB: t}
	unavailable(r, errors.New("did not answer PING"))
	if _, err := Binary(); err == nil {
		if r.skipped != "" || !strings.Contains(r.failed, "installed but did not run: did not answer PING") {
			t.Fatalf("installed: skipped %q, failed %q", r.skipped, r.failed)
		}
	} else if r.failed != "" || !strings.HasPrefix(r.skipped, "MISSING PEER: TestX: ") {
		t.Fatalf("not installed: skipped %q, failed %q", r.skipped, r.failed)
	}
}

// TestCluster starts a 3-node cluster, checks every node serves its third
// of the slots and knows the others, and that a restarted node comes back
// empty, serving its slots again.
func TestCluster(t *testing.T) {
	c := RequireCluster(t)
	if RequireCluster(t) != c {
		t.Fatal("RequireCluster started a second cluster")
	}
	if len(c.Nodes) != 3 {
		t.Fatalf("%d nodes", len(c.Nodes))
	}
	for i := range c.Nodes {
		info, err := c.Do(i, "CLUSTER", "INFO")
		if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:3\r\n") {
			t.Fatalf("node %d: CLUSTER INFO %q, %v", i, info, err)
		}
	}
	// "{a}" hashes to slot 15495 (CLUSTER KEYSLOT): the last node's.
	owner := c.NodeOfSlot(15495)
	if slot, err := c.Do(owner, "CLUSTER", "KEYSLOT", "{a}x"); err != nil || slot != "15495" {
		t.Fatalf("CLUSTER KEYSLOT {a}x = %q, %v", slot, err)
	}
	if _, err := c.Do(owner, "SET", "{a}x", "1"); err != nil {
		t.Fatal(err)
	}
	other := (owner + 1) % 3
	if _, err := c.Do(other, "GET", "{a}x"); err == nil || !strings.HasPrefix(err.Error(), "MOVED 15495 ") {
		t.Fatalf("GET on a node not serving the slot: %v, want MOVED", err)
	}
	if err := c.Restart(owner); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Do(owner, "GET", "{a}x"); err != nil || v != "" {
		t.Fatalf("after a restart GET = %q, %v; want nothing", v, err)
	}
	if !strings.HasPrefix(c.URL(), "redis://127.0.0.1:") || strings.Count(c.URL(), ",") != 2 {
		t.Fatalf("URL %q", c.URL())
	}
}

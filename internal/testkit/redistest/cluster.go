package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Cluster is a private Redis Cluster of masters on loopback, each a
// redis-server started with cluster mode on, no persistence and no
// replicas; the 16384 slots are split evenly between the nodes.
//
// Ports: a cluster node announces its TCP port and its cluster-bus port to
// the others, so neither can be port 0. Each is chosen by the kernel: a
// listener is bound on 127.0.0.1:0, its port read and the listener closed,
// then redis-server is started on it (the bus port is set with
// --cluster-port, never the client port plus 10000). Should another
// process take the port in between, the server fails to bind and the node
// is started again on fresh ports (a few tries).
type Cluster struct {
	bin   string
	Nodes []*Node
}

// Node is one master of a Cluster.
type Node struct {
	dir    string
	port   int
	bus    int
	slotLo int
	slotHi int
	cmd    *exec.Cmd
	reaped bool // waitPing reaped the exited process
}

// Addr returns the node's client address (127.0.0.1:port).
func (n *Node) Addr() string { return "127.0.0.1:" + strconv.Itoa(n.port) }

// Slots returns the first and last slot the node serves.
func (n *Node) Slots() (lo, hi int) { return n.slotLo, n.slotHi }

// URL returns the cluster's seed addresses as one URL,
// redis://127.0.0.1:P1,127.0.0.1:P2,…
func (c *Cluster) URL() string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr()
	}
	return "redis://" + strings.Join(addrs, ",")
}

// StartCluster starts an n-node cluster (n ≥ 3, as Redis Cluster asks for
// at least three masters) and waits, at most StartTimeout, until every node
// reports cluster_state:ok and knows all n nodes. The caller must Close it.
func StartCluster(n int) (*Cluster, error) {
	if n < 3 {
		return nil, fmt.Errorf("redistest: a cluster of %d nodes: at least 3", n)
	}
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	c := &Cluster{bin: bin}
	ok := false
	defer func() {
		if !ok {
			c.Close()
		}
	}()
	for i := 0; i < n; i++ {
		dir, err := os.MkdirTemp("", "zgcluster")
		if err != nil {
			return nil, err
		}
		nd := &Node{dir: dir, slotLo: i * 16384 / n, slotHi: (i+1)*16384/n - 1}
		c.Nodes = append(c.Nodes, nd)
		if err := c.startNode(nd, true); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	for _, nd := range c.Nodes {
		if _, err := command(ctx, nd.Addr(), "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(nd.slotLo), strconv.Itoa(nd.slotHi)); err != nil {
			return nil, fmt.Errorf("redistest: node %s: CLUSTER ADDSLOTSRANGE: %v", nd.Addr(), err)
		}
	}
	for _, nd := range c.Nodes[1:] {
		if _, err := command(ctx, c.Nodes[0].Addr(), "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(nd.port), strconv.Itoa(nd.bus)); err != nil {
			return nil, fmt.Errorf("redistest: CLUSTER MEET %s: %v", nd.Addr(), err)
		}
	}
	for _, nd := range c.Nodes {
		if err := c.waitReady(ctx, nd); err != nil {
			return nil, err
		}
	}
	ok = true
	return c, nil
}

// startNode starts nd's server on fresh kernel-chosen ports (fresh is
// false on a restart: the ports the other nodes know are kept) and waits
// until it answers PING.
func (c *Cluster) startNode(nd *Node, fresh bool) error {
	var last error
	for try := 0; try < 5; try++ {
		if fresh {
			p1, p2, err := freePorts()
			if err != nil {
				return err
			}
			nd.port, nd.bus = p1, p2
		}
		nd.cmd = exec.Command(c.bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(nd.port),
			"--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(nd.bus),
			"--cluster-config-file", filepath.Join(nd.dir, "nodes.conf"), "--cluster-node-timeout", "5000",
			"--save", "", "--appendonly", "no", "--dir", nd.dir, "--logfile", filepath.Join(nd.dir, "redis.log"))
		nd.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := nd.cmd.Start(); err != nil {
			return fmt.Errorf("redistest: start %s: %v", c.bin, err)
		}
		nd.reaped = false
		last = waitPing(nd)
		if last == nil {
			return nil
		}
		log, _ := os.ReadFile(filepath.Join(nd.dir, "redis.log"))
		nd.kill()
		if !fresh || !strings.Contains(string(log), "in use") {
			return fmt.Errorf("redistest: cluster node on port %d did not answer PING: %v; log: %s", nd.port, last, strings.TrimSpace(string(log)))
		}
		// Another process took a port between its choice and the bind.
	}
	return fmt.Errorf("redistest: cluster node: no free ports after 5 tries: %v", last)
}

// waitPing waits, at most StartTimeout, until nd answers PING, or its
// process exits.
func waitPing(nd *Node) error {
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	for {
		r, err := command(ctx, nd.Addr(), "PING")
		if err == nil && r == "PONG" {
			return nil
		}
		// No goroutine waits on the process (goleak runs before the
		// test binary's clean-up kills the shared cluster): poll it.
		var ws syscall.WaitStatus
		if pid, _ := syscall.Wait4(nd.cmd.Process.Pid, &ws, syscall.WNOHANG, nil); pid == nd.cmd.Process.Pid {
			nd.reaped = true
			return fmt.Errorf("the server exited (%v)", ws)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no answer within %v: %v", StartTimeout, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// waitReady waits until nd reports cluster_state:ok, all slots assigned
// and every node of c known.
func (c *Cluster) waitReady(ctx context.Context, nd *Node) error {
	want := fmt.Sprintf("cluster_known_nodes:%d", len(c.Nodes))
	for {
		info, err := command(ctx, nd.Addr(), "CLUSTER", "INFO")
		if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_slots_ok:16384") &&
			strings.Contains(info, want+"\r\n") {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: cluster node %s not ready within %v: %v; CLUSTER INFO: %q", nd.Addr(), StartTimeout, err, info)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Restart kills node i and starts it again on the same ports with its
// cluster configuration (node id and slots) kept, as a node restarting
// without persistence: it rejoins serving its slots, empty. It waits, at
// most StartTimeout, until the node reports cluster_state:ok. It fails if
// another process took one of the node's ports while it was down (the
// other nodes know those ports: the node cannot move).
func (c *Cluster) Restart(i int) error {
	nd := c.Nodes[i]
	nd.kill()
	if err := c.startNode(nd, false); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	return c.waitReady(ctx, nd)
}

// Do sends one command to node i and returns its reply (a status, an
// integer or a bulk string as text; an error reply as an error).
func (c *Cluster) Do(i int, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return command(ctx, c.Nodes[i].Addr(), args...)
}

// NodeOfSlot returns the index of the node serving slot.
func (c *Cluster) NodeOfSlot(slot int) int {
	for i, nd := range c.Nodes {
		if slot >= nd.slotLo && slot <= nd.slotHi {
			return i
		}
	}
	return -1
}

func (n *Node) kill() {
	if n.cmd != nil && n.cmd.Process != nil && !n.reaped {
		n.cmd.Process.Kill()
		n.cmd.Wait()
	}
	n.cmd = nil
}

// Close kills every node and removes their directories.
func (c *Cluster) Close() {
	for _, nd := range c.Nodes {
		nd.kill()
		os.RemoveAll(nd.dir)
	}
}

// freePorts returns two TCP ports of 127.0.0.1 the kernel chose (free when
// chosen).
func freePorts() (int, int, error) {
	var ports [2]int
	var ls [2]net.Listener
	for i := range ls {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			for _, p := range ls[:i] {
				p.Close()
			}
			return 0, 0, fmt.Errorf("redistest: choose a port: %v", err)
		}
		ls[i], ports[i] = l, l.Addr().(*net.TCPAddr).Port
	}
	ls[0].Close()
	ls[1].Close()
	return ports[0], ports[1], nil
}

// command sends one RESP command to addr and reads one reply: a simple
// string, an integer or a bulk string as text; an error reply as an error.
func command(ctx context.Context, addr string, args ...string) (string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n > 1<<20 {
			return "", fmt.Errorf("bad bulk length %q", line)
		}
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}

var sharedCluster struct {
	sync.Mutex
	c   *Cluster
	err error
}

// RequireCluster returns the test binary's shared 3-node cluster, starting
// it on first use; like Require, it skips t loudly, or fails it under $CI,
// when no server can run. StopCluster (or Stop) kills it.
func RequireCluster(t testing.TB) *Cluster {
	t.Helper()
	sharedCluster.Lock()
	if sharedCluster.c == nil && sharedCluster.err == nil {
		sharedCluster.c, sharedCluster.err = StartCluster(3)
	}
	c, err := sharedCluster.c, sharedCluster.err
	sharedCluster.Unlock()
	if err != nil {
		unavailable(t, err)
		return nil
	}
	return c
}

// StartClusterT starts a private n-node cluster for t alone, closed when t
// ends; like Require, it skips t loudly, or fails it under $CI, when none
// can run.
func StartClusterT(t testing.TB, n int) *Cluster {
	t.Helper()
	c, err := StartCluster(n)
	if err != nil {
		unavailable(t, err)
		return nil
	}
	t.Cleanup(c.Close)
	return c
}

func stopCluster() {
	sharedCluster.Lock()
	defer sharedCluster.Unlock()
	if sharedCluster.c != nil {
		sharedCluster.c.Close()
		sharedCluster.c = nil
	}
	sharedCluster.err = nil
}

// Package redistest runs a private redis-server (Debian's redis-server
// package, or any redis-server/valkey-server on PATH) for one test binary:
// started on first use on a UNIX socket in a fresh temporary directory, with
// no TCP port, no persistence and no AOF, and killed by [Stop] (call it from
// TestMain). A missing server skips the test with one loud line, or fails it
// when $CI is set.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/missingpeer"
)

// StartTimeout bounds how long a server may take to answer PING.
const StartTimeout = 15 * time.Second

// Server is one private redis-server.
type Server struct {
	cmd  *exec.Cmd
	dir  string
	sock string
}

// Socket returns the server's UNIX socket path.
func (s *Server) Socket() string { return s.sock }

// URL returns the server's address as a redis URL (unix:///path).
func (s *Server) URL() string { return "unix://" + s.sock }

// Binary returns the path of the redis-server (or valkey-server) binary, or
// an error naming what was looked for.
func Binary() (string, error) {
	for _, name := range []string{"redis-server", "valkey-server"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
		if p := "/usr/bin/" + name; fileExists(p) {
			return p, nil
		}
	}
	return "", errors.New("neither redis-server nor valkey-server is on PATH or in /usr/bin")
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// Start starts a new server and waits, at most StartTimeout, until it
// answers PING. The caller must Close it.
func Start() (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "zgredis") // short: a socket path has ~100 bytes
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, sock: filepath.Join(dir, "redis.sock")}
	if err := s.start(bin); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// Restart kills the server and starts a new one on the same socket, as a
// Redis restart without persistence: it comes back empty. It waits, at
// most StartTimeout, until the new one answers PING.
func (s *Server) Restart() error {
	bin, err := Binary()
	if err != nil {
		return err
	}
	s.kill()
	return s.start(bin)
}

// start runs bin on s's socket and directory and waits until it answers
// PING; on failure nothing is left running.
func (s *Server) start(bin string) error {
	s.cmd = exec.Command(bin, "--port", "0", "--unixsocket", s.sock, "--unixsocketperm", "700",
		"--save", "", "--appendonly", "no", "--dir", s.dir, "--logfile", filepath.Join(s.dir, "redis.log"),
		"--databases", "1")
	// The server dies with the test binary, even on a timeout panic.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("redistest: start %s: %v", bin, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	for {
		err := ping(ctx, s.sock)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			s.kill()
			return fmt.Errorf("redistest: %s did not answer PING within %v: %v; log: %s", bin, StartTimeout, err, strings.TrimSpace(string(log)))
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func ping(ctx context.Context, sock string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// kill kills the server's process, if it runs, and waits for it.
func (s *Server) kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
	s.cmd = nil
}

// Close kills the server and removes its directory.
func (s *Server) Close() {
	s.kill()
	os.RemoveAll(s.dir)
}

var shared struct {
	sync.Mutex
	srv *Server
	err error
	n   atomic.Uint64
}

// Require returns the test binary's shared server, starting it on first use.
// When no server can run it skips t loudly, or fails it under $CI.
func Require(t testing.TB) *Server {
	t.Helper()
	shared.Lock()
	if shared.srv == nil && shared.err == nil {
		shared.srv, shared.err = Start()
	}
	srv, err := shared.srv, shared.err
	shared.Unlock()
	if err != nil {
		unavailable(t, err)
		return nil
	}
	return srv
}

// StartT starts a private server for t alone, closed when t ends; like
// Require, it skips t loudly, or fails it under $CI, when none can run.
func StartT(t testing.TB) *Server {
	t.Helper()
	s, err := Start()
	if err != nil {
		unavailable(t, err)
		return nil
	}
	t.Cleanup(s.Close)
	return s
}

// unavailable skips t (fails it under CI) when no redis-server is installed;
// one that is installed but did not start is a failure: a broken or
// overloaded machine is not a missing peer.
func unavailable(t testing.TB, err error) {
	t.Helper()
	if _, berr := Binary(); berr != nil {
		missingpeer.Skip(t, berr.Error()+"; tests against a real Redis did not run", "redis-server")
		return
	}
	t.Fatalf("redis-server is installed but did not run: %v", err)
}

// Prefix returns a key prefix no other test of this binary uses, so tests
// can share the server.
func Prefix(t testing.TB) string {
	return fmt.Sprintf("t%d:", shared.n.Add(1))
}

// Stop kills the shared server and the shared cluster, if they were
// started. Call it from TestMain (goleak.Cleanup or after m.Run).
func Stop() {
	stopCluster()
	shared.Lock()
	defer shared.Unlock()
	if shared.srv != nil {
		shared.srv.Close()
		shared.srv = nil
	}
	shared.err = nil
}

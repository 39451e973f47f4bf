package zmtpguard

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/testkit/pypeer"
)

// pyPeer is a running testdata/curve_peer.py.
type pyPeer struct {
	lines chan string
	done  chan error
}

func startCurvePeer(t *testing.T, ctx context.Context, args ...string) *pyPeer {
	t.Helper()
	py := pypeer.Require(t, "zmq")
	script, _ := filepath.Abs(filepath.Join("testdata", "curve_peer.py"))
	cmd := exec.CommandContext(ctx, py, append([]string{script}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &pyPeer{lines: make(chan string, 64), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		var last string
		for sc.Scan() {
			last = sc.Text()
			p.lines <- last
		}
		close(p.lines)
		err := cmd.Wait()
		if err == nil && !strings.HasPrefix(last, "ok") {
			err = errors.New("peer ended without ok: " + last)
		}
		p.done <- err
	}()
	return p
}

// wait returns the peer's exit error and all of its output.
func (p *pyPeer) wait(t *testing.T) (string, error) {
	t.Helper()
	var all []string
	for l := range p.lines {
		all = append(all, l)
	}
	err := <-p.done
	return strings.Join(all, "\n"), err
}

// port reads the "port N" line of a server peer.
func (p *pyPeer) port(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok || !strings.HasPrefix(l, "port ") {
			t.Fatalf("python server did not report a port: %q", l)
		}
		return strings.TrimPrefix(l, "port ")
	case <-time.After(30 * time.Second):
		t.Fatal("python server did not start within 30 s")
	}
	return ""
}

func mustKeyPair(t testing.TB) (CurveKey, CurveKey) {
	t.Helper()
	pub, sec, err := GenerateCurveKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	return pub, sec
}

// curveServeOne serves n messages on c (REP/ROUTER/DEALER echo, PULL
// checks), answering PINGs, and returns how many PINGs it answered.
func curveServeOne(c *Conn, n int) (int, error) {
	var m Message
	pings := 0
	for i := 0; i < n; {
		if err := c.ReadMessage(&m); err != nil {
			return pings, fmt.Errorf("after %d messages: %w", i, err)
		}
		if m.Command == cmdPing {
			pings++
			c.Pong(&m)
			c.Flush()
			continue
		}
		if m.Command != "" {
			continue
		}
		switch c.local {
		case "REP", "ROUTER", "DEALER":
			if err := c.WriteMessage(m.Frames...); err != nil {
				return pings, err
			}
			if err := c.Flush(); err != nil {
				return pings, err
			}
		case "PULL":
			if want := fmt.Sprintf("msg-%d", i); string(m.Frames[0]) != want || len(m.Frames) != 2 || len(m.Frames[1]) != 300 {
				return pings, fmt.Errorf("message %d is %q (%d frames), want %q", i, m.Frames[0], len(m.Frames), want)
			}
		}
		i++
	}
	return pings, nil
}

// TestCurveInteropPyzmqClients: pyzmq CURVE clients of every kind against
// a zmtpguard CURVE listener that admits only their key.
func TestCurveInteropPyzmqClients(t *testing.T) {
	srvPub, srvSec := mustKeyPair(t)
	cliPub, cliSec := mustKeyPair(t)
	for _, tc := range []struct {
		client string
		local  SocketType
	}{
		{"REQ", "REP"}, {"DEALER", "ROUTER"}, {"PUSH", "PULL"}, {"SUB", "PUB"}, {"XSUB", "XPUB"},
	} {
		t.Run(tc.client, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
			defer cancel()
			cfg := &Config{Curve: &CurveConfig{Server: true, SecretKey: srvSec, Authorize: newKeySet(cliPub).Authorize}}
			l, err := Listen(ctx, "tcp", "127.0.0.1:0", tc.local, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			const n = 20
			p := startCurvePeer(t, ctx, "client", tc.client, "tcp://"+l.Addr().String(), srvPub.String(), cliPub.String(), cliSec.String(), fmt.Sprint(n))
			c, err := l.Accept(ctx)
			if err != nil {
				out, perr := p.wait(t)
				t.Fatalf("accept: %v (python: %v %s)", err, perr, out)
			}
			defer c.Close()
			if c.Peer().CurveKey != cliPub {
				t.Errorf("peer key %s, want %s", c.Peer().CurveKey, cliPub)
			}
			var serr error
			if tc.local == "PUB" || tc.local == "XPUB" {
				// Wait for the subscription, then publish n messages.
				var m Message
				if err := c.ReadMessage(&m); err != nil {
					t.Fatal(err)
				}
				// Our greeting announces ZMTP 3.1, so libzmq subscribes
				// with a SUBSCRIBE command (a 3.0 peer gets "\x01topic").
				sub := m.Command == cmdSubscribe && len(m.Frames) == 1
				msg := m.Command == "" && len(m.Frames) == 1 && len(m.Frames[0]) >= 1 && m.Frames[0][0] == 1
				if !sub && !msg {
					t.Fatalf("expected a subscription, got %q (command %q)", m.Frames, m.Command)
				}
				for i := 0; i < n; i++ {
					c.WriteMessage([]byte("topic"), []byte(fmt.Sprintf("msg-%d", i)))
				}
				serr = c.Flush()
			} else {
				var pings int
				pings, serr = curveServeOne(c, n)
				if tc.client == "DEALER" && serr == nil && pings == 0 {
					t.Error("no heartbeat PING arrived inside CURVE from the libzmq DEALER (heartbeat_ivl 50 ms, 1 s pause)")
				}
			}
			out, perr := p.wait(t)
			if serr != nil || perr != nil {
				t.Fatalf("server: %v; python: %v\n%s", serr, perr, out)
			}
			t.Logf("python: %s", out)
		})
	}
}

// TestCurveInteropPyzmqServers: zmtpguard CURVE clients against pyzmq CURVE
// servers, without ZAP (curve_server only) and with zmq.auth admitting the
// client's certificate directory.
func TestCurveInteropPyzmqServers(t *testing.T) {
	srvPub, srvSec := mustKeyPair(t)
	dir := t.TempDir()
	pubPath, secPath, cliPub, err := CreateCertificates(dir, "client")
	if err != nil {
		t.Fatal(err)
	}
	_ = pubPath
	cert, err := loadCertificate(secPath)
	if err != nil || cert.Public != cliPub {
		t.Fatalf("load secret certificate: %v", err)
	}
	for _, tc := range []struct {
		server string
		local  SocketType
		allow  string
	}{
		{"REP", "REQ", "-"}, {"ROUTER", "DEALER", dir}, {"PULL", "PUSH", dir}, {"PUB", "SUB", "-"},
	} {
		t.Run(tc.server+"/allow="+filepath.Base(tc.allow), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
			defer cancel()
			const n = 20
			p := startCurvePeer(t, ctx, "server", tc.server, "tcp://127.0.0.1", srvSec.String(), tc.allow, fmt.Sprint(n))
			port := p.port(t)
			cfg := &Config{Curve: &CurveConfig{SecretKey: cert.Secret, ServerKey: srvPub}}
			c, err := Dial(ctx, "tcp", "127.0.0.1:"+port, tc.local, nil, cfg)
			if err != nil {
				out, perr := p.wait(t)
				t.Fatalf("dial: %v (python: %v %s)", err, perr, out)
			}
			defer c.Close()
			var m Message
			switch tc.local {
			case "SUB":
				c.WriteMessage([]byte("\x01"))
				c.Flush()
				for i := 0; i < n; i++ {
					if err := c.ReadMessage(&m); err != nil {
						t.Fatal(err)
					}
					if len(m.Frames) != 2 || string(m.Frames[1]) != fmt.Sprintf("msg-%d", i) {
						t.Fatalf("message %d: %q", i, m.Frames)
					}
				}
			default:
				for i := 0; i < n; i++ {
					body := []byte(fmt.Sprintf("msg-%d", i))
					var frames [][]byte
					if tc.local == "REQ" {
						frames = [][]byte{{}, body}
					} else if tc.local == "DEALER" {
						frames = [][]byte{body, []byte("two")}
					} else {
						frames = [][]byte{body}
					}
					if err := c.WriteMessage(frames...); err != nil {
						t.Fatal(err)
					}
					if err := c.Flush(); err != nil {
						t.Fatal(err)
					}
					if tc.local == "PUSH" {
						continue
					}
					if err := c.ReadMessage(&m); err != nil {
						t.Fatal(err)
					}
					if len(m.Frames) != len(frames) || string(m.Frames[len(frames)-2+1]) != string(frames[len(frames)-1]) {
						t.Fatalf("reply %d: %q, want %q", i, m.Frames, frames)
					}
				}
			}
			out, perr := p.wait(t)
			if perr != nil {
				t.Fatalf("python: %v\n%s", perr, out)
			}
			t.Logf("python: %s", out)
		})
	}
}

// TestCurveInteropWrongKeys: a wrong server key or an unlisted client key
// fails cleanly on both sides, in both directions.
func TestCurveInteropWrongKeys(t *testing.T) {
	srvPub, srvSec := mustKeyPair(t)
	cliPub, cliSec := mustKeyPair(t)
	otherPub, _ := mustKeyPair(t)

	t.Run("pyzmq-client-wrong-server-key", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		viol := make(chan Violation, 4)
		cfg := &Config{Curve: &CurveConfig{Server: true, SecretKey: srvSec, Authorize: allowAnyClient},
			OnViolation: func(v Violation) { viol <- v }}
		l, err := Listen(ctx, "tcp", "127.0.0.1:0", "PULL", cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		p := startCurvePeer(t, ctx, "client", "PUSH", "tcp://"+l.Addr().String(), otherPub.String(), cliPub.String(), cliSec.String(), "0")
		select {
		case v := <-viol:
			if v.Reason != decodeguard.ReasonAuth {
				t.Errorf("violation %v, want reason auth", &v)
			}
		case <-ctx.Done():
			t.Fatal("no violation")
		}
		l.Close()
		if out, err := p.wait(t); err != nil {
			t.Fatalf("python: %v\n%s", err, out)
		}
		if st := l.Stats(); st.Refused[decodeguard.ReasonAuth] == 0 {
			t.Errorf("auth refusal not counted: %+v", st.Refused)
		}
	})

	t.Run("pyzmq-client-unlisted-key", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		viol := make(chan Violation, 4)
		cfg := &Config{Curve: &CurveConfig{Server: true, SecretKey: srvSec, Authorize: newKeySet(otherPub).Authorize},
			OnViolation: func(v Violation) { viol <- v }}
		l, err := Listen(ctx, "tcp", "127.0.0.1:0", "PULL", cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		p := startCurvePeer(t, ctx, "client", "PUSH", "tcp://"+l.Addr().String(), srvPub.String(), cliPub.String(), cliSec.String(), "0")
		select {
		case v := <-viol:
			if v.Reason != decodeguard.ReasonAuth || !strings.Contains(v.Detail, cliPub.fingerprint()) {
				t.Errorf("violation %v, want reason auth naming the key's fingerprint", &v)
			}
		case <-ctx.Done():
			t.Fatal("no violation")
		}
		out, err := p.wait(t)
		if err != nil {
			t.Fatalf("python: %v\n%s", err, out)
		}
		if !strings.Contains(out, fmt.Sprintf("event %d", zmq4EventHandshakeFailedAuth)) {
			t.Errorf("python client did not see an auth failure: %s", out)
		}
	})

	for _, tc := range []struct{ name, allow string }{{"go-client-wrong-server-key", "-"}, {"go-client-unlisted-key", "dir"}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
			defer cancel()
			allow, serverKey := "-", otherPub
			if tc.allow == "dir" {
				allow, serverKey = t.TempDir(), srvPub
				if _, _, _, err := CreateCertificates(allow, "someone-else"); err != nil {
					t.Fatal(err)
				}
			}
			p := startCurvePeer(t, ctx, "server", "PULL", "tcp://127.0.0.1", srvSec.String(), allow, "0")
			port := p.port(t)
			cfg := &Config{Curve: &CurveConfig{SecretKey: cliSec, ServerKey: serverKey}, HandshakeTimeout: 10 * time.Second}
			c, err := Dial(ctx, "tcp", "127.0.0.1:"+port, "PUSH", nil, cfg)
			if err == nil {
				c.Close()
				t.Fatal("handshake succeeded")
			}
			t.Logf("dial error: %v", err)
			if decodeguard.ReasonOf(err) != decodeguard.ReasonAuth && tc.allow == "dir" {
				t.Errorf("error %v, want reason auth", err)
			}
			if out, err := p.wait(t); err != nil {
				t.Fatalf("python: %v\n%s", err, out)
			}
		})
	}
}

// zmq4EventHandshakeFailedAuth is libzmq's ZMQ_EVENT_HANDSHAKE_FAILED_AUTH.
const zmq4EventHandshakeFailedAuth = 0x4000

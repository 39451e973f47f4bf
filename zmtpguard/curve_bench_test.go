package zmtpguard

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/pypeer"
	"golang.org/x/crypto/nacl/box"
)

// curveStream is n back-to-back MESSAGEs of one 100-byte frame each, boxed
// under key with nonces from first.
func curveStream(key *[32]byte, first uint64, n int) []byte {
	s := make([]byte, 0, n*(2+curveMessageOverhead+100))
	plain := make([]byte, 101)
	var nonce [24]byte
	for i := range n {
		c := first + uint64(i)
		shortNonce(&nonce, noncePrefixMsgC, c)
		hdr := len(s)
		s = append(s, 0, 0)
		s = append(s, "\x07MESSAGE"...)
		s = binary.BigEndian.AppendUint64(s, c)
		s = box.SealAfterPrecomputation(s, plain, &nonce, key)
		s[hdr+1] = byte(len(s) - hdr - 2)
	}
	return s
}

// BenchmarkCurveReadMessage100 measures CURVE receive of 100-byte messages
// in memory: header checks, nonce check, XSalsa20-Poly1305 open into the
// reused Message. The stream is pre-boxed (65536 messages); at its end the
// reader rewinds it and resets the expected nonce, off the clock.
func BenchmarkCurveReadMessage100(b *testing.B) {
	key := [32]byte{7}
	const n = 1 << 16
	stream := curveStream(&key, 1, n)
	nc := &loopConn{b: stream}
	cs := newCurveState(&key, true)
	c := &Conn{nc: nc, br: bufio.NewReaderSize(nc, defaultReadBufferSize), cfg: Config{}.withDefaults(), local: "PULL", cz: cs}
	var m Message
	read := 0
	b.SetBytes(100)
	b.ReportAllocs()
	for b.Loop() {
		if read == n {
			b.StopTimer()
			nc.off = 0
			c.br.Reset(nc)
			cs.recvNonce = 0
			read = 0
			b.StartTimer()
		}
		if err := c.ReadMessage(&m); err != nil {
			b.Fatal(err)
		}
		read++
	}
	if len(m.Frames) != 1 || len(m.Frames[0]) != 100 {
		b.Fatalf("read %d frames", len(m.Frames))
	}
}

// BenchmarkCurveWriteMessage100 measures boxing and buffering one 100-byte
// frame (the bytes go to a discarding connection).
func BenchmarkCurveWriteMessage100(b *testing.B) {
	nc := newBytesConn(nil)
	cs := newCurveState(&[32]byte{7}, true)
	c := &Conn{nc: nc, cfg: Config{}.withDefaults(), local: "PUSH", cz: cs}
	body := make([]byte, 100)
	b.SetBytes(100)
	b.ReportAllocs()
	for b.Loop() {
		if err := c.WriteMessage(body); err != nil {
			b.Fatal(err)
		}
	}
	c.Flush()
}

// BenchmarkCurveHandshake measures a whole CURVE connection setup over
// loopback: a guarded Dial, the listener's admission and CURVE server
// handshake (four X25519 operations each side), Accept, and both closes.
func BenchmarkCurveHandshake(b *testing.B) {
	ctx := context.Background()
	srvPub, srvSec, _ := GenerateCurveKeyPair()
	cliPub, cliSec, _ := GenerateCurveKeyPair()
	scfg := &Config{GreetingTimeout: 10 * time.Second, HandshakeTimeout: 10 * time.Second,
		Curve: &CurveConfig{Server: true, SecretKey: srvSec, Authorize: newKeySet(cliPub).Authorize}}
	ccfg := &Config{HandshakeTimeout: 10 * time.Second, Curve: &CurveConfig{SecretKey: cliSec, ServerKey: srvPub}}
	l, err := Listen(ctx, "tcp", "127.0.0.1:0", "PULL", scfg)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()
	b.ReportAllocs()
	for b.Loop() {
		c, err := Dial(ctx, "tcp", addr, "PUSH", nil, ccfg)
		if err != nil {
			b.Fatal(err)
		}
		s, err := l.Accept(ctx)
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
		s.Close()
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCurvePyzmqPush100 receives 100-byte messages from a pyzmq
// (libzmq 4.3.4) CURVE PUSH on a guarded CURVE PULL Conn and reports the
// receiver's CPU time per message (this whole process: the benchmark's
// reading goroutine is all that runs), to compare with
// testdata/curve_bench.py's pyzmq PULL on the same sender. The sender
// sends max(b.N, 1000) messages.
func BenchmarkCurvePyzmqPush100(b *testing.B) {
	py := pypeer.Require(b, "zmq")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	srvPub, srvSec, _ := GenerateCurveKeyPair()
	cliPub, cliSec, _ := GenerateCurveKeyPair()
	cfg := &Config{ReadBufferSize: 256 << 10, Curve: &CurveConfig{Server: true, SecretKey: srvSec, Authorize: newKeySet(cliPub).Authorize}}
	l, err := Listen(ctx, "tcp", "127.0.0.1:0", "PULL", cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	n := max(b.N, 1000)
	script, _ := filepath.Abs(filepath.Join("testdata", "curve_bench.py"))
	cmd := exec.CommandContext(ctx, py, script, "push", "tcp://"+l.Addr().String(), srvPub.String(), cliPub.String(), cliSec.String(), fmt.Sprint(n))
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer cmd.Wait()
	c, err := l.Accept(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var m Message
	if err := c.ReadMessage(&m); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 1; i < n; i++ {
		if err := c.ReadMessage(&m); err != nil {
			b.Fatal(err)
		}
		if len(m.Frames) != 1 || len(m.Frames[0]) != 100 {
			b.Fatalf("message %d: %d frames", i, len(m.Frames))
		}
	}
	b.StopTimer()
	cpu := cpuTime() - cpu0
	if cpu > 0 {
		b.ReportMetric(float64(n-1)/cpu.Seconds(), "msgs/cpu-s")
	}
}

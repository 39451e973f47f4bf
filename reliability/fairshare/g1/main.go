// Command g1 re-measures issue 29's rows 1, 9 and 10 from outside, on
// loopback, against a running zmqguard CLI process (see run.sh):
//
//	g1 conns -addr 127.0.0.1:PORT [-n 4096] [-honest 12]   # row 1
//	g1 http -http 127.0.0.1:PORT -zmq 127.0.0.1:PORT -pid PID  # row 9
//	g1 curve -addr 127.0.0.1:PORT -server S.key -client C.key_secret  # row 10
//
// Every attack is bounded in count and time and prints one JSON line.
package main

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/nacl/box"

	"github.com/zmqguard/zmqguard/zmtpguard"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: g1 conns|http|curve [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "conns":
		err = conns(os.Args[2:])
	case "http":
		err = httpAttack(os.Args[2:])
	case "curve":
		err = curve(os.Args[2:])
	default:
		err = fmt.Errorf("unknown attack %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "g1:", err)
		os.Exit(1)
	}
}

func emit(v any) {
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}

// greeting is a ZMTP 3.1 NULL client greeting.
func greeting(mech string) []byte {
	g := make([]byte, 64)
	g[0], g[9], g[10], g[11] = 0xff, 0x7f, 3, 1
	copy(g[12:32], mech)
	return g
}

// command frames a ZMTP command (short or long header).
func command(name string, body []byte) []byte {
	b := append([]byte{byte(len(name))}, name...)
	b = append(b, body...)
	return frame(0x04, b)
}

func frame(flags byte, b []byte) []byte {
	if len(b) > 255 {
		h := make([]byte, 9)
		h[0] = flags | 0x02
		binary.BigEndian.PutUint64(h[1:], uint64(len(b)))
		return append(h, b...)
	}
	return append([]byte{flags, byte(len(b))}, b...)
}

func readyBody(socketType string) []byte {
	var b []byte
	b = append(b, byte(len("Socket-Type")))
	b = append(b, "Socket-Type"...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(socketType)))
	return append(b, socketType...)
}

// dialFrom dials addr from the local address src.
func dialFrom(src, addr string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	return d.Dial("tcp", addr)
}

// nullHandshake runs a NULL handshake as a DEALER and reports whether the
// server's greeting and READY arrived within timeout.
func nullHandshake(nc net.Conn, timeout time.Duration) error {
	nc.SetDeadline(time.Now().Add(timeout))
	defer nc.SetDeadline(time.Time{})
	if _, err := nc.Write(append(greeting("NULL"), command("READY", readyBody("DEALER"))...)); err != nil {
		return err
	}
	var g [64]byte
	if _, err := io.ReadFull(nc, g[:]); err != nil {
		return fmt.Errorf("greeting: %w", err)
	}
	_, body, err := readFrame(nc)
	if err != nil {
		return fmt.Errorf("READY: %w", err)
	}
	if !bytes.HasPrefix(body, []byte("\x05READY")) {
		return fmt.Errorf("expected READY, got %q", body[:min(len(body), 16)])
	}
	return nil
}

func readFrame(r io.Reader) (byte, []byte, error) {
	var h [9]byte
	if _, err := io.ReadFull(r, h[:2]); err != nil {
		return 0, nil, err
	}
	size := uint64(h[1])
	if h[0]&0x02 != 0 {
		if _, err := io.ReadFull(r, h[2:9]); err != nil {
			return 0, nil, err
		}
		size = binary.BigEndian.Uint64(h[1:9])
	}
	if size > 1<<20 {
		return 0, nil, errors.New("frame over 1 MiB")
	}
	b := make([]byte, size)
	_, err := io.ReadFull(r, b)
	return h[0], b, err
}

// conns (row 1): n NULL connections from one address, each PINGing once a
// second, then honest handshakes from another address.
func conns(args []string) error {
	fs := flag.NewFlagSet("conns", flag.ExitOnError)
	addr := fs.String("addr", "", "listener host:port")
	n := fs.Int("n", 4096, "attack connections")
	honest := fs.Int("honest", 12, "honest handshakes")
	attackSrc := fs.String("attack-src", "127.0.0.1", "attacker's source address")
	honestSrc := fs.String("honest-src", "127.0.0.3", "honest source address")
	fs.Parse(args)
	var held atomic.Int64
	var mu sync.Mutex
	var open []net.Conn
	stop := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	var failed int
	for range *n {
		nc, err := dialFrom(*attackSrc, *addr, 5*time.Second)
		if err != nil {
			failed++
			continue
		}
		if err := nullHandshake(nc, 5*time.Second); err != nil {
			nc.Close()
			failed++
			continue
		}
		held.Add(1)
		mu.Lock()
		open = append(open, nc)
		mu.Unlock()
		wg.Add(2)
		go func() { // PING once a second
			defer wg.Done()
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					if _, err := nc.Write(command("PING", []byte{0, 0})); err != nil {
						return
					}
				}
			}
		}()
		go func() { // drain PONGs; note the end
			defer wg.Done()
			io.Copy(io.Discard, nc)
			held.Add(-1)
		}()
	}
	setup := time.Since(start)
	// Honest handshakes, after the attacker has had its chance.
	served := 0
	var errs []string
	for range *honest {
		nc, err := dialFrom(*honestSrc, *addr, 5*time.Second)
		if err == nil {
			err = nullHandshake(nc, 5*time.Second)
			nc.Close()
		}
		if err == nil {
			served++
		} else if len(errs) < 3 {
			errs = append(errs, err.Error())
		}
	}
	stillHeld := held.Load()
	close(stop)
	mu.Lock()
	for _, nc := range open {
		nc.Close()
	}
	mu.Unlock()
	wg.Wait()
	emit(map[string]any{"row": 1, "attack_conns": *n, "attack_established": len(open), "attack_failed": failed,
		"attack_held_at_end": stillHeld, "setup_s": setup.Seconds(), "honest": *honest, "honest_served": served, "honest_errors": errs})
	return nil
}

// rss and fds of a process from /proc.
func procStats(pid int) (rssKiB int, fds int) {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			rssKiB, _ = strconv.Atoi(f[1])
		}
	}
	ents, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	return rssKiB, len(ents)
}

// httpAttack (row 9): big unfinished headers and idle connections on the
// HTTP endpoint; then honest ZMTP handshakes on the process's ZMQ port.
func httpAttack(args []string) error {
	fs := flag.NewFlagSet("http", flag.ExitOnError)
	httpAddr := fs.String("http", "", "HTTP endpoint host:port")
	zmq := fs.String("zmq", "", "ZMQ listener host:port")
	pid := fs.Int("pid", 0, "the CLI process (RSS, descriptors)")
	big := fs.Int("big", 300, "connections sending an unfinished ~1 MiB header")
	idle := fs.Int("idle", 19000, "idle connection attempts (stops after 20 failures in a row)")
	honest := fs.Int("honest", 20, "honest ZMTP handshakes")
	fs.Parse(args)
	rss0, fds0 := procStats(*pid)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	hdr := append([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: "), bytes.Repeat([]byte("a"), 1<<20)...)
	var wg sync.WaitGroup
	var bigSent atomic.Int64
	for range *big {
		c, err := net.DialTimeout("tcp", *httpAddr, 5*time.Second)
		if err != nil {
			break
		}
		conns = append(conns, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetWriteDeadline(time.Now().Add(20 * time.Second))
			n, _ := c.Write(hdr) // never finished: no CRLFCRLF
			bigSent.Add(int64(n))
		}()
	}
	wg.Wait()
	// Honest handshakes on the ZMQ port while the idle connections
	// arrive: one every idle/honest attempts (and the rest at the end).
	served := 0
	var errs []string
	tried := 0
	honestOnce := func() {
		tried++
		nc, err := net.DialTimeout("tcp", *zmq, 5*time.Second)
		if err == nil {
			err = nullHandshake(nc, 5*time.Second)
			nc.Close()
		}
		if err == nil {
			served++
		} else if len(errs) < 3 {
			errs = append(errs, err.Error())
		}
	}
	every := max(1, *idle / *honest)
	peakRSS, peakFDs := 0, 0
	sample := func() {
		r, f := procStats(*pid)
		peakRSS, peakFDs = max(peakRSS, r), max(peakFDs, f)
	}
	idleOpened, idleFailed, streak := 0, 0, 0
	for i := range *idle {
		if i%every == every-1 && tried < *honest {
			sample()
			honestOnce()
		}
		c, err := net.DialTimeout("tcp", *httpAddr, 2*time.Second)
		if err != nil {
			idleFailed++
			if streak++; streak == 20 {
				break // 20 failures in a row: the endpoint takes no more
			}
			continue
		}
		streak = 0
		conns = append(conns, c)
		idleOpened++
	}
	sample()
	for tried < *honest {
		honestOnce()
	}
	sample()
	emit(map[string]any{"row": 9, "rss_before_kib": rss0, "fds_before": fds0, "big_headers": *big, "big_bytes_sent": bigSent.Load(),
		"idle_opened": idleOpened, "idle_failed": idleFailed, "peak_rss_kib": peakRSS, "peak_fds": peakFDs,
		"honest": *honest, "honest_served": served, "honest_errors": errs})
	return nil
}

// Nonce prefixes of RFC 26.
const (
	pHello    = "CurveZMQHELLO---"
	pWelcome  = "WELCOME-"
	pVouch    = "VOUCH---"
	pInitiate = "CurveZMQINITIATE"
	pMsgC     = "CurveZMQMESSAGEC"
)

func shortNonce(n *[24]byte, prefix string, c uint64) {
	copy(n[:16], prefix)
	binary.BigEndian.PutUint64(n[16:], c)
}

func longNonce(n *[24]byte, prefix string, long []byte) {
	copy(n[:8], prefix)
	copy(n[8:], long)
}

// curve (row 10): an admitted CURVE client sends one MESSAGE frame's header
// and then dribbles its body, a byte a second; how long does the server
// keep the connection?
func curve(args []string) error {
	fs := flag.NewFlagSet("curve", flag.ExitOnError)
	addr := fs.String("addr", "", "listener host:port")
	srvPath := fs.String("server", "", "server public certificate (NAME.key)")
	cliPath := fs.String("client", "", "client secret certificate (NAME.key_secret), admitted by the server")
	hold := fs.Duration("hold", 45*time.Second, "give up (connection still open) after this long")
	size := fs.Int("size", 200, "plaintext bytes of the dribbled message")
	stype := fs.String("type", "DEALER", "our socket type (DEALER for handshake-listener, PUSH for sink)")
	fs.Parse(args)
	scPublic, _, err := zmtpguard.LoadCertificate(*srvPath)
	if err != nil {
		return err
	}
	ccPublic, ccSecret, err := zmtpguard.LoadCertificate(*cliPath)
	if err != nil {
		return err
	}
	srvPub, cliPub, cliSec := [32]byte(scPublic), [32]byte(ccPublic), [32]byte(ccSecret)
	nc, err := net.DialTimeout("tcp", *addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	shortPub, shortSec, _ := box.GenerateKey(rand.Reader)
	nc.Write(greeting("CURVE"))
	var g [64]byte
	if _, err := io.ReadFull(nc, g[:]); err != nil {
		return fmt.Errorf("server greeting: %w", err)
	}
	var n [24]byte
	hello := append([]byte("\x05HELLO\x01\x00"), make([]byte, 72)...)
	hello = append(hello, shortPub[:]...)
	hello = binary.BigEndian.AppendUint64(hello, 1)
	shortNonce(&n, pHello, 1)
	hello = box.Seal(hello, make([]byte, 64), &n, &srvPub, shortSec)
	nc.Write(frame(0x04, hello))
	_, w, err := readFrame(nc)
	if err != nil || len(w) < 24 || string(w[:8]) != "\x07WELCOME" {
		return fmt.Errorf("WELCOME: %v", err)
	}
	longNonce(&n, pWelcome, w[8:24])
	plain, ok := box.Open(nil, w[24:], &n, &srvPub, shortSec)
	if !ok || len(plain) < 32 {
		return errors.New("WELCOME does not open")
	}
	var serverShort, session [32]byte
	copy(serverShort[:], plain[:32])
	cookie := plain[32:]
	box.Precompute(&session, &serverShort, shortSec)
	var vl [16]byte
	rand.Read(vl[:])
	longNonce(&n, pVouch, vl[:])
	vouch := box.Seal(nil, append(append([]byte{}, shortPub[:]...), srvPub[:]...), &n, &serverShort, &cliSec)
	ip := append(append(append(append([]byte{}, cliPub[:]...), vl[:]...), vouch...), readyBody(*stype)...)
	init := append([]byte("\x08INITIATE"), cookie...)
	init = binary.BigEndian.AppendUint64(init, 2)
	shortNonce(&n, pInitiate, 2)
	init = box.SealAfterPrecomputation(init, ip, &n, &session)
	nc.Write(frame(0x04, init))
	if _, r, err := readFrame(nc); err != nil || !bytes.HasPrefix(r, []byte("\x05READY")) {
		return fmt.Errorf("READY: %v (%q)", err, r[:min(len(r), 16)])
	}
	nc.SetDeadline(time.Time{})
	// One MESSAGE of size bytes: header and the first 16 bytes, then a
	// byte a second.
	shortNonce(&n, pMsgC, 3)
	body := binary.BigEndian.AppendUint64([]byte("\x07MESSAGE"), 3)
	body = box.SealAfterPrecomputation(body, append([]byte{0}, make([]byte, *size)...), &n, &session)
	msg := frame(0, body)
	start := time.Now()
	sent := 18
	nc.Write(msg[:sent])
	closed := make(chan time.Duration, 1)
	go func() {
		io.Copy(io.Discard, nc)
		closed <- time.Since(start)
	}()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	res := map[string]any{"row": 10, "message_bytes": len(msg)}
	for {
		select {
		case d := <-closed:
			res["closed_after_s"], res["bytes_dribbled"] = d.Seconds(), sent
			emit(res)
			return nil
		case <-t.C:
			if time.Since(start) >= *hold {
				res["still_open_after_s"], res["bytes_dribbled"] = time.Since(start).Seconds(), sent
				emit(res)
				return nil
			}
			if sent < len(msg)-1 {
				nc.Write(msg[sent : sent+1])
				sent++
			}
		}
	}
}

// Package load holds what the benchmark programs under bench/ share: the
// pre-encoded frames the senders write (the vLLM stats vector, sized
// frames, junk hazards), ZMTP framing helpers for the raw receiver, endpoint
// parsing, dialing with retry, and the one-line JSON result every program
// prints.
//
// It is test tooling, not library code: it trusts its own command lines and
// exists so that every program measures the same bytes the same way.
package load

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/zmqguard/zmqguard/internal/stack/zmtpwire"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// StatsVector is the 101-byte EngineCoreOutputs a vLLM engine core pushes to
// the DP coordinator: docs/protocol.md §2's "minimal stats" vector (engine 1,
// running 3, waiting 5, step 42, wave 7, timestamp 12345.678) with
// kv_cache_usage 0.25 added, as Python's msgpack encodes it.
const StatsVector = "\x94\x01\x90\x85" +
	"\xb0num_running_reqs\x03" +
	"\xb0num_waiting_reqs\x05" +
	"\xacstep_counter\x2a" +
	"\xaccurrent_wave\x07" +
	"\xaekv_cache_usage\xcb\x3f\xd0\x00\x00\x00\x00\x00\x00" +
	"\xcb\x40\xc8\x1c\xd6\xc8\xb4\x39\x58"

// Junk returns the hazards a junk mix interleaves with valid frames: a bare
// msgpack int (the frame a port scanner's "E" makes; vLLM's msgspec raised
// "Expected array, got int") and a str holding invalid UTF-8 (refused by the
// structural pre-scan).
func Junk() [][]byte {
	return [][]byte{{0x45}, {0xa3, 0xe0, 0x80, 0x80}}
}

// Body returns a frame body of size bytes: the stats vector when size is 0,
// else size bytes of a repeating pattern.
func Body(size int) []byte {
	if size <= 0 {
		return []byte(StatsVector)
	}
	b := make([]byte, size)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return b
}

// AppendFrame appends one ZMTP data frame holding body to dst, with the
// MORE flag when more is set.
func AppendFrame(dst, body []byte, more bool) []byte {
	var flags byte
	if more {
		flags = zmtpwire.FlagMore
	}
	if len(body) > 255 {
		n := uint64(len(body))
		dst = append(dst, flags|zmtpwire.FlagLong,
			byte(n>>56), byte(n>>48), byte(n>>40), byte(n>>32), byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	} else {
		dst = append(dst, flags, byte(len(body)))
	}
	return append(dst, body...)
}

// Chunk returns count repetitions of the single-frame messages bodies[0],
// bodies[1], ... (one group per repetition) as one byte stream.
func Chunk(bodies [][]byte, count int) []byte {
	size := 0
	for _, b := range bodies {
		size += len(b) + 9
	}
	buf := make([]byte, 0, size*count)
	for range count {
		for _, b := range bodies {
			buf = AppendFrame(buf, b, false)
		}
	}
	return buf
}

// GroupsPerChunk returns how many groups of the given bodies fit in about
// chunk bytes (at least one).
func GroupsPerChunk(bodies [][]byte, chunk int) int {
	size := len(Chunk(bodies, 1))
	return max(1, chunk/size)
}

// TCPAddr returns the host:port of a "tcp://host:port" endpoint.
func TCPAddr(endpoint string) (string, error) {
	addr, ok := strings.CutPrefix(endpoint, "tcp://")
	if !ok {
		return "", fmt.Errorf("endpoint %q: want tcp://host:port", endpoint)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", fmt.Errorf("endpoint %q: %v", endpoint, err)
	}
	return addr, nil
}

// DialRetry dials endpoint with the guarded ZMTP handshake as a socket of
// type local, retrying every 10 ms until it succeeds or wait passes (the
// receiver may still be starting).
func DialRetry(endpoint string, local zmtpguard.SocketType, wait time.Duration) (*zmtpguard.Conn, error) {
	return DialRetryConfig(endpoint, local, wait, nil)
}

// DialRetryConfig is DialRetry with a connection config (CURVE, say).
func DialRetryConfig(endpoint string, local zmtpguard.SocketType, wait time.Duration, cfg *zmtpguard.Config) (*zmtpguard.Conn, error) {
	addr, err := TCPAddr(endpoint)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err := zmtpguard.Dial(ctx, "tcp", addr, local, nil, cfg)
		cancel()
		if err == nil {
			return c, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("dial %s: %w", endpoint, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ReadyCommand returns the READY command frame (header included) a socket
// of type t with no identity sends.
func ReadyCommand(t zmtpguard.SocketType) []byte {
	body := []byte{5}
	body = append(body, "READY"...)
	body = append(body, byte(len("Socket-Type")))
	body = append(body, "Socket-Type"...)
	n := len(t)
	body = append(body, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	body = append(body, t...)
	return append([]byte{zmtpwire.FlagCommand, byte(len(body))}, body...)
}

// ReadFrameHeader reads one ZMTP frame header from r: the flags and the
// body size. It trusts the peer (the raw receiver is the unguarded ceiling)
// except that it refuses sizes over max.
func ReadFrameHeader(r io.ByteReader, max uint64) (flags byte, size uint64, err error) {
	flags, err = r.ReadByte()
	if err != nil {
		return 0, 0, err
	}
	n := 1
	if flags&zmtpwire.FlagLong != 0 {
		n = 8
	}
	for range n {
		c, err := r.ReadByte()
		if err != nil {
			return 0, 0, io.ErrUnexpectedEOF
		}
		size = size<<8 | uint64(c)
	}
	if size > max {
		return 0, 0, fmt.Errorf("frame of %d bytes over the %d-byte limit", size, max)
	}
	return flags, size, nil
}

// Meter measures a receive loop between its first and its last message:
// wall time, process CPU time and heap allocations.
type Meter struct {
	n           uint64
	first, last time.Time
	m0, m1      runtime.MemStats
	cpu0, cpu1  time.Duration
}

// Count records one message; call Stop after the last one.
func (m *Meter) Count() {
	m.n++
	if m.n == 1 {
		runtime.ReadMemStats(&m.m0)
		m.cpu0 = CPUTime()
		m.first = time.Now()
	}
}

// Stop ends the measurement at the last message counted.
func (m *Meter) Stop() {
	m.last = time.Now()
	m.cpu1 = CPUTime()
	runtime.ReadMemStats(&m.m1)
}

// CPUTime returns the CPU time (user and system, every thread) the process
// has used so far.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// N returns the messages counted.
func (m *Meter) N() uint64 { return m.n }

// Result returns the measurement: msgs/s, CPU time and allocations per
// message over the messages after the first.
func (m *Meter) Result(name string) Result {
	r := Result{Program: name, Messages: m.n}
	if m.n > 1 {
		span := m.last.Sub(m.first)
		r.Seconds = span.Seconds()
		if span > 0 {
			r.MsgsPerSec = float64(m.n-1) / span.Seconds()
		}
		r.CPUNsPerMsg = float64(m.cpu1-m.cpu0) / float64(m.n-1)
		r.AllocsPerMsg = float64(m.m1.Mallocs-m.m0.Mallocs) / float64(m.n-1)
		r.BytesPerMsg = float64(m.m1.TotalAlloc-m.m0.TotalAlloc) / float64(m.n-1)
	}
	return r
}

// Result is the JSON line a receiving program prints on stdout.
type Result struct {
	Program      string  `json:"program"`
	Messages     uint64  `json:"messages"`
	Seconds      float64 `json:"seconds"`
	MsgsPerSec   float64 `json:"msgs_per_sec"`
	CPUNsPerMsg  float64 `json:"cpu_ns_per_msg"`
	AllocsPerMsg float64 `json:"allocs_per_msg"`
	BytesPerMsg  float64 `json:"bytes_per_msg"`
}

// PrintJSON writes v as one JSON line on stdout.
func PrintJSON(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		Fatal(err)
	}
	fmt.Printf("%s\n", b)
}

// Bound tells the harness where a receiver listens, once it is bound: one
// line on stderr, "PROG: bound endpoint=tcp://HOST:PORT". bench/run.sh
// binds every receiver on port 0 (the kernel chooses a free port) and reads
// the chosen port from this line before it starts the sender.
func Bound(endpoint string) {
	fmt.Fprintf(os.Stderr, "%s: bound endpoint=%s\n", progName(), endpoint)
}

// Fatal prints err on stderr and exits 1.
func Fatal(err error) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", progName(), err)
	os.Exit(1)
}

func progName() string {
	name := os.Args[0]
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	return name
}

// ErrUsage is returned for a bad command line.
var ErrUsage = errors.New("bad usage")

// Swarm is a set of attacking connections made by NewSwarm.
type Swarm struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	held []*zmtpguard.Conn // reachable while the Swarm is: a lost Conn is closed by its finalizer
}

// NewSwarm dials conns guarded PUSH connections to addr (host:port), at
// most 32 handshakes at a time, each within 10 s, and runs attack on each
// connection made, in its own goroutine. It returns once every dial was
// started; the connections stay open until the process exits.
func NewSwarm(addr string, conns int, attack func(c *zmtpguard.Conn)) *Swarm {
	s := &Swarm{}
	sem := make(chan struct{}, 32)
	for range conns {
		sem <- struct{}{}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			c, err := zmtpguard.Dial(ctx, "tcp", addr, "PUSH", nil, nil)
			cancel()
			<-sem
			if err != nil {
				return
			}
			s.mu.Lock()
			s.held = append(s.held, c)
			s.mu.Unlock()
			attack(c)
		}()
	}
	return s
}

// Wait waits for every dial and attack to end.
func (s *Swarm) Wait() { s.wg.Wait() }

// Connected returns how many connections were made so far.
func (s *Swarm) Connected() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}

package zmtpguard

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
)

// --- wire builders for hostile peers ---

// greetingWith returns a 64-byte ZMTP greeting with the given version and
// mechanism (copied raw into the 20-byte field).
func greetingWith(major, minor byte, mech string) []byte {
	g := make([]byte, greetingSize)
	g[0] = 0xFF
	g[9] = 0x7F
	g[10] = major
	g[11] = minor
	copy(g[12:32], mech)
	return g
}

// prop encodes one READY property.
func prop(name string, value string) []byte {
	b := []byte{byte(len(name))}
	b = append(b, name...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(value)))
	return append(b, value...)
}

// commandFrame encodes a command frame (short or long header as needed).
func commandFrame(name string, data []byte) []byte {
	body := append([]byte{byte(len(name))}, name...)
	body = append(body, data...)
	return append(appendFrameHeader(nil, flagCommand, len(body)), body...)
}

// readyFrame encodes a READY command with the given raw property bytes.
func readyFrame(props ...[]byte) []byte {
	var p []byte
	for _, x := range props {
		p = append(p, x...)
	}
	return commandFrame(cmdReady, p)
}

// dataFrame encodes one data frame.
func dataFrame(more bool, body []byte) []byte {
	var f byte
	if more {
		f = flagMore
	}
	return append(appendFrameHeader(nil, f, len(body)), body...)
}

// longHeader encodes a long frame header claiming size bytes.
func longHeader(flags byte, size uint64) []byte {
	h := []byte{flags | flagLong}
	return binary.BigEndian.AppendUint64(h, size)
}

// handshakeAs returns a valid NULL greeting and READY for a peer of type st.
func handshakeAs(st SocketType) []byte {
	b := greetingWith(3, 0, "NULL")
	return append(b, readyFrame(prop("Socket-Type", string(st)), prop("Identity", ""))...)
}

// --- resource accounting ---

type resources struct {
	goroutines int
	fds        int
	heap       uint64
}

func countFDs(t testing.TB) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("counting fds: %v", err)
	}
	return len(ents)
}

func measure(t testing.TB) resources {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return resources{goroutines: runtime.NumGoroutine(), fds: countFDs(t), heap: ms.HeapAlloc}
}

// expectNearBaseline polls until goroutines, fds and heap are back within
// slack of base, failing after the deadline with the last measurement.
func expectNearBaseline(t testing.TB, base resources, within time.Duration) resources {
	t.Helper()
	const gSlack, fdSlack, heapSlack = 10, 10, 16 << 20
	deadline := time.Now().Add(within)
	for {
		r := measure(t)
		ok := r.goroutines <= base.goroutines+gSlack && r.fds <= base.fds+fdSlack && r.heap <= base.heap+heapSlack
		if ok {
			return r
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			t.Fatalf("resources not back near baseline: base %+v now %+v\n%s", base, r, buf[:n])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// --- waiting helpers ---

// waitClosed reads c until it fails and reports whether that happened
// (EOF or reset) before the deadline.
func waitClosed(c net.Conn, within time.Duration) error {
	c.SetReadDeadline(time.Now().Add(within))
	var buf [4096]byte
	for {
		_, err := c.Read(buf[:])
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return fmt.Errorf("connection still open after %v", within)
		}
		return nil
	}
}

// readUntilCommand reads a server's greeting and frames from c until a
// command frame named name arrives; it returns the command's data.
func readUntilCommand(c net.Conn, name string, within time.Duration) ([]byte, error) {
	c.SetReadDeadline(time.Now().Add(within))
	defer c.SetReadDeadline(time.Time{})
	br := bufio.NewReader(c)
	if _, err := br.Discard(greetingSize); err != nil {
		return nil, err
	}
	for {
		flags, err := br.ReadByte()
		if err != nil {
			return nil, err
		}
		var size uint64
		if flags&flagLong != 0 {
			var b [8]byte
			if _, err := io.ReadFull(br, b[:]); err != nil {
				return nil, err
			}
			size = binary.BigEndian.Uint64(b[:])
		} else {
			s, err := br.ReadByte()
			if err != nil {
				return nil, err
			}
			size = uint64(s)
		}
		if size > 1<<20 {
			return nil, fmt.Errorf("server frame of %d bytes", size)
		}
		body := make([]byte, size)
		if _, err := io.ReadFull(br, body); err != nil {
			return nil, err
		}
		if flags&flagCommand != 0 {
			n, d, err := parseCommand(body)
			if err != nil {
				return nil, err
			}
			if string(n) == name {
				return d, nil
			}
		}
	}
}

// --- guarded Listener with a Go reader, as the socket layer would use it ---

// sink accepts from a Listener and reads every Conn, answering PINGs and
// forwarding data messages (first frame) to msgs.
type sink struct {
	l     *Listener
	msgs  chan string
	cmds  chan string
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[*Conn]bool
}

func startSink(t testing.TB, l *Listener) *sink {
	s := &sink{l: l, msgs: make(chan string, 1024), cmds: make(chan string, 1024), conns: make(map[*Conn]bool)}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := l.Accept(context.Background())
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns[c] = true
			s.mu.Unlock()
			s.wg.Add(1)
			go s.serve(c)
		}
	}()
	return s
}

func (s *sink) serve(c *Conn) {
	defer s.wg.Done()
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	var m Message
	for {
		if err := c.ReadMessage(&m); err != nil {
			return
		}
		if m.Command != "" {
			select {
			case s.cmds <- m.Command:
			default:
			}
			if m.Command == cmdPing {
				c.Pong(&m)
				c.Flush()
			}
			continue
		}
		select {
		case s.msgs <- string(m.Frames[0]):
		default:
		}
	}
}

// close closes the listener and the Conns still open, and waits for the
// sink's goroutines.
func (s *sink) close() {
	s.l.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// zmqPushRoundTrip dials a zmq4 PUSH at endpoint and sends body; it fails
// the test if the dial or send does not finish within the limit.
func zmqPushRoundTrip(t testing.TB, endpoint, body string, recv func(want string) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	push := zmq4.NewPush(ctx, zmq4.WithDialerRetry(20*time.Millisecond), zmq4.WithLogger(quietLogger()))
	defer push.Close()
	done := make(chan error, 1)
	go func() {
		if err := push.Dial(endpoint); err != nil {
			done <- fmt.Errorf("dial: %w", err)
			return
		}
		done <- push.Send(zmq4.NewMsgString(body))
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("real zmq4 peer: %v", err)
		}
	case <-ctx.Done():
		t.Fatalf("real zmq4 peer: dial/send did not finish (listener wedged?)")
	}
	if err := recv(body); err != nil {
		t.Fatalf("real zmq4 peer round trip: %v", err)
	}
}

// expectMsg waits for want on ch, skipping other messages.
func expectMsg(ch <-chan string, want string, within time.Duration) error {
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		select {
		case got := <-ch:
			if got == want {
				return nil
			}
		case <-timer.C:
			return fmt.Errorf("message %q not received within %v", want, within)
		}
	}
}

var schemeSeq atomic.Int64

// registerTestTransport registers a fresh guarded transport under a unique
// scheme (zmq4's registry is global and permanent).
func registerTestTransport(t testing.TB, network string, cfg *Config) (*guardTransport, string) {
	t.Helper()
	tr, err := newTransport(network, cfg)
	if err != nil {
		t.Fatal(err)
	}
	scheme := fmt.Sprintf("zmqguardtest%d", schemeSeq.Add(1))
	if err := zmq4.RegisterTransport(scheme, tr); err != nil {
		t.Fatal(err)
	}
	return tr, scheme
}

func quietLogger() *log.Logger { return log.New(io.Discard, "", 0) }

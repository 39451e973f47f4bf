package discovery

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// dnsServer is a minimal authoritative DNS server over UDP on loopback
// for the tests: it answers A and AAAA questions for the names of its zone
// from what the test sets, NXDOMAIN for other names, and SERVFAIL for
// everything while failing is set. It parses one-question queries
// defensively (a malformed one is dropped) and never compresses anything
// but the answers' owner name (a pointer to the question's).
type dnsServer struct {
	pc      net.PacketConn
	done    chan struct{}
	queries atomic.Int64 // questions answered

	mu      sync.Mutex
	zone    map[string][]netip.Addr // lower-case absolute name → addresses
	failing bool
	// empties counts answers without an address (NXDOMAIN or none of the
	// type) since the zone last changed; fails SERVFAIL answers since
	// fail(true).
	empties, fails int
}

func (s *dnsServer) counts() (empties, fails int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.empties, s.fails
}

func startDNS(t *testing.T) *dnsServer {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &dnsServer{pc: pc, done: make(chan struct{}), zone: map[string][]netip.Addr{}}
	go s.serve()
	t.Cleanup(func() {
		pc.Close()
		<-s.done
	})
	return s
}

// set makes name resolve to addrs (none: the name exists with no
// address); unset makes it NXDOMAIN.
func (s *dnsServer) set(name string, addrs ...netip.Addr) {
	s.mu.Lock()
	s.zone[strings.ToLower(name)] = append([]netip.Addr{}, addrs...)
	s.empties = 0
	s.mu.Unlock()
}

func (s *dnsServer) unset(name string) {
	s.mu.Lock()
	delete(s.zone, strings.ToLower(name))
	s.empties = 0
	s.mu.Unlock()
}

func (s *dnsServer) fail(on bool) {
	s.mu.Lock()
	s.failing, s.fails = on, 0
	s.mu.Unlock()
}

// resolver returns a pure-Go resolver that asks s only.
func (s *dnsServer) resolver() *net.Resolver {
	addr := s.pc.LocalAddr().String()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", addr)
	}}
}

func (s *dnsServer) serve() {
	defer close(s.done)
	buf := make([]byte, 4096)
	for {
		n, from, err := s.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		if resp, ok := s.answer(buf[:n]); ok {
			_, _ = s.pc.WriteTo(resp, from)
		}
	}
}

// question is a parsed one-question query.
type question struct {
	id    uint16
	rd    bool
	name  string // lower case, absolute ("a.b.")
	qtype uint16
	raw   []byte // the question section as sent
}

var errQuery = errors.New("malformed query")

// parseQuery parses a query: a 12-byte header (not a response, opcode
// QUERY, one question, no answer or authority records; additional records
// such as EDNS0's OPT are ignored), then one question of class IN whose
// name is uncompressed labels of at most 63 bytes, 255 in all.
func parseQuery(b []byte) (question, error) {
	var q question
	if len(b) < 12 {
		return q, errQuery
	}
	flags := binary.BigEndian.Uint16(b[2:])
	if flags&0x8000 != 0 || (flags>>11)&0xf != 0 {
		return q, errQuery
	}
	if binary.BigEndian.Uint16(b[4:]) != 1 || binary.BigEndian.Uint16(b[6:]) != 0 || binary.BigEndian.Uint16(b[8:]) != 0 {
		return q, errQuery
	}
	q.id, q.rd = binary.BigEndian.Uint16(b), flags&0x0100 != 0
	off := 12
	var name strings.Builder
	for {
		if off >= len(b) {
			return q, errQuery
		}
		l := int(b[off])
		off++
		if l == 0 {
			break
		}
		if l > 63 || off+l > len(b) || name.Len()+l+1 > 255 {
			return q, errQuery // over-long, truncated, or a compression pointer
		}
		name.WriteString(strings.ToLower(string(b[off : off+l])))
		name.WriteByte('.')
		off += l
	}
	if off+4 > len(b) || binary.BigEndian.Uint16(b[off+2:]) != 1 {
		return q, errQuery
	}
	q.qtype = binary.BigEndian.Uint16(b[off:])
	q.name = name.String()
	if q.name == "" {
		q.name = "."
	}
	q.raw = b[12 : off+4]
	return q, nil
}

const (
	typeA    = 1
	typeAAAA = 28
)

// answer builds the response to query b (ok false: drop it).
func (s *dnsServer) answer(b []byte) ([]byte, bool) {
	q, err := parseQuery(b)
	if err != nil {
		return nil, false
	}
	var rcode uint16
	var ans []netip.Addr
	s.mu.Lock()
	addrs, known := s.zone[q.name]
	switch {
	case s.failing:
		rcode = 2 // SERVFAIL
		s.fails++
	case !known:
		rcode = 3 // NXDOMAIN
		s.empties++
	default:
		for _, a := range addrs {
			if (q.qtype == typeA && a.Is4()) || (q.qtype == typeAAAA && a.Is6()) {
				ans = append(ans, a)
			}
		}
		if len(ans) == 0 {
			s.empties++
		}
	}
	s.mu.Unlock()
	flags := uint16(0x8000 | 0x0400 | 0x0080) // response, authoritative, recursion available
	if q.rd {
		flags |= 0x0100
	}
	out := binary.BigEndian.AppendUint16(nil, q.id)
	out = binary.BigEndian.AppendUint16(out, flags|rcode)
	out = binary.BigEndian.AppendUint16(out, 1)
	out = binary.BigEndian.AppendUint16(out, uint16(len(ans)))
	out = binary.BigEndian.AppendUint16(out, 0)
	out = binary.BigEndian.AppendUint16(out, 0)
	out = append(out, q.raw...)
	for _, a := range ans {
		out = append(out, 0xc0, 12) // the question's name
		out = binary.BigEndian.AppendUint16(out, q.qtype)
		out = binary.BigEndian.AppendUint16(out, 1) // IN
		out = binary.BigEndian.AppendUint32(out, 0) // TTL
		rd := a.AsSlice()
		out = binary.BigEndian.AppendUint16(out, uint16(len(rd)))
		out = append(out, rd...)
	}
	s.queries.Add(1)
	return out, true
}

// TestDNSServerParse: the test server's parser drops malformed queries
// (it is test code, but it must not answer garbage or panic).
func TestDNSServerParse(t *testing.T) {
	good := []byte{0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1, 1, 'a', 4, 't', 'e', 's', 't', 0, 0, 1, 0, 1}
	q, err := parseQuery(good)
	if err != nil || q.name != "a.test." || q.qtype != typeA || q.id != 0x1234 || !q.rd {
		t.Fatalf("good query: %+v %v", q, err)
	}
	for i := range len(good) {
		if _, err := parseQuery(good[:i]); err == nil {
			t.Fatalf("truncated at %d accepted", i)
		}
	}
	ptr := append([]byte{}, good...)
	ptr[12] = 0xc0
	if _, err := parseQuery(ptr); err == nil {
		t.Fatal("compression pointer accepted")
	}
	resp := append([]byte{}, good...)
	resp[2] |= 0x80
	if _, err := parseQuery(resp); err == nil {
		t.Fatal("response accepted as a query")
	}
}

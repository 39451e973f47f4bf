package socket

import (
	"strings"
	"testing"
	"time"
)

// FuzzParseEndpoint: parsing never panics, and an accepted endpoint has a
// known network and a non-empty address.
func FuzzParseEndpoint(f *testing.F) {
	for _, s := range []string{
		"tcp://127.0.0.1:5555", "tcp://*:0", "tcp://[::1]:80", "tcp://localhost:65535",
		"tcp://host:65536", "tcp://:1", "ipc:///tmp/x.sock", "ipc://", "udp://x:1",
		"tcp://[::1:80", "tcp://a:b", "tcp://a b:1", "ipc://a\x00b", "",
	} {
		f.Add(s, uint8(1))
		f.Add(s, uint8(0))
	}
	f.Fuzz(func(t *testing.T, s string, mode uint8) {
		bind := mode&1 == 1
		if len(s) > 2*maxEndpoint {
			// Refused by length alone; long inputs only slow the minimizer.
			s = s[:2*maxEndpoint+1]
		}
		ep, err := parseEndpoint(s, bind)
		if err != nil {
			if ep != (endpoint{}) {
				t.Fatalf("error with a value: %+v", ep)
			}
			return
		}
		if ep.network != "tcp" && ep.network != "unix" {
			t.Fatalf("network %q", ep.network)
		}
		if ep.address == "" {
			t.Fatal("empty address")
		}
		if ep.network == "tcp" && !bind && strings.HasPrefix(ep.address, ":") {
			t.Fatalf("dial address without host: %q", ep.address)
		}
	})
}

// FuzzXPubTopics drives a subscriber's topic table with arbitrary
// subscription messages (each input byte string split on '|') and checks
// matching against a naive model that keeps every subscription count.
func FuzzXPubTopics(f *testing.F) {
	f.Add([]byte("\x01a|\x01ab|\x00a|\x01|\x00"), []byte("abc"))
	f.Add([]byte("\x01x|\x01x|\x00x"), []byte("xy"))
	f.Add([]byte("\x00zz|\x01"), []byte(""))
	f.Fuzz(func(t *testing.T, ops, probe []byte) {
		s, err := newSocket(kXPub, DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		p := newPeerConn(s, nil, &Peer{id: 1}, nil)
		model := map[string]int{}
		for _, op := range strings.Split(string(ops), "|") {
			if len(op) == 0 || op[0] > 1 {
				continue
			}
			if !p.applySub([]byte(op)) {
				t.Fatalf("refused %q below the limits", op)
			}
			topic := op[1:]
			if op[0] == 1 {
				model[topic]++
			} else if model[topic] > 0 {
				model[topic]--
			}
		}
		want := false
		for tpc, c := range model {
			if c > 0 && strings.HasPrefix(string(probe), tpc) {
				want = true
			}
		}
		if got := p.matches(probe); got != want {
			t.Fatalf("matches(%q) = %v, model says %v (model %v)", probe, got, want, model)
		}
		if n := len(p.topicList()); n > maxTopicsPerPeer+1 {
			t.Fatalf("%d topics", n)
		}
		// The socket-wide index agrees with the subscriber's own table.
		got := s.topicIdx.match(probe, nil)
		if (len(got) == 1) != want || len(got) > 1 {
			t.Fatalf("index match(%q) = %d subscribers, model says %v", probe, len(got), want)
		}
		if gone := p.dropTopics(); s.topicIdx.count != 0 || len(s.topicIdx.subs) != 0 || len(s.topicIdx.sorted) != 0 {
			t.Fatalf("after departure (%d topics gone) the index holds %d pairs, %d topics, lengths %v", len(gone), s.topicIdx.count, len(s.topicIdx.subs), s.topicIdx.sorted)
		}
	})
}

// FuzzProcess feeds arbitrary messages (frames split on 0xFF in data;
// cmd selects a ZMTP command or data) through every socket type's receive
// rules and checks what would reach Recv.
func FuzzProcess(f *testing.F) {
	f.Add(uint8(kRouter), uint8(0), []byte("a\xffb"))
	f.Add(uint8(kReq), uint8(0), []byte("\xffreply"))
	f.Add(uint8(kReq), uint8(0), []byte("no-delimiter"))
	f.Add(uint8(kXPub), uint8(0), []byte("\x01topic"))
	f.Add(uint8(kXPub), uint8(3), []byte("topic"))
	f.Add(uint8(kXPub), uint8(4), []byte("topic"))
	f.Add(uint8(kSub), uint8(0), []byte("x"))
	f.Add(uint8(kPull), uint8(1), []byte("\x00\x01ctx"))
	f.Add(uint8(kPush), uint8(5), []byte{})
	cmds := []string{"", "PING", "PONG", "SUBSCRIBE", "CANCEL", "ERROR"}
	f.Fuzz(func(t *testing.T, k, cmd uint8, data []byte) {
		k = k%uint8(kXSub) + 1
		s, err := newSocket(kind(k), DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		s.subIdx.Store(&subIndex{topics: []string{"x"}})
		info := &Peer{identity: []byte{0, 0, 0, 0, 1}}
		p := newPeerConn(s, nil, info, nil)
		var sl slot
		sl.m.Command = cmds[int(cmd)%len(cmds)]
		if sl.m.Command != "" {
			sl.m.Frames = [][]byte{data}
		} else {
			for _, fr := range strings.Split(string(data), "\xff") {
				sl.m.Frames = append(sl.m.Frames, []byte(fr))
			}
		}
		in := append([][]byte(nil), sl.m.Frames...)
		deliver, err := p.process(&sl)
		if sl.m.Command == "PING" {
			// RFC 37: TTL in deciseconds, a PONG echoing at most 16 bytes.
			want := int64(0)
			if len(data) >= 2 {
				want = int64(uint16(data[0])<<8|uint16(data[1])) * int64(100*time.Millisecond)
			}
			if got := p.peerTTL.Load(); got != want {
				t.Fatalf("PING %x: TTL %v, want %v", data, time.Duration(got), time.Duration(want))
			}
			if len(p.ctrl) != 1 || p.ctrl[0].cmd != "PONG" || len(p.ctrl[0].buf) > 16 {
				t.Fatalf("PING %x: queued %+v, want one PONG of at most 16 bytes", data, p.ctrl)
			}
		}
		if sl.m.Command == "PONG" && s.pongs.Load() != 1 {
			t.Fatal("PONG not counted")
		}
		if sl.m.Command == "ERROR" {
			if err == nil {
				t.Fatal("ERROR command did not close")
			}
			return
		}
		if err != nil {
			t.Fatalf("unexpected error %v", err)
		}
		if !deliver {
			return
		}
		out := sl.out
		switch {
		case sl.m.Command != "":
			if s.kind != kXPub || (sl.m.Command != "SUBSCRIBE" && sl.m.Command != "CANCEL") {
				t.Fatalf("command %s delivered on %s", sl.m.Command, s.typ)
			}
			if len(out) != 1 || out[0][0] > 1 || string(out[0][1:]) != string(data) {
				t.Fatalf("converted subscription %q", out)
			}
		case s.kind == kRouter:
			if len(out) != len(in)+1 || string(out[0]) != string(info.identity) {
				t.Fatalf("router out %q", out)
			}
		case s.kind == kReq:
			if len(in) < 2 || len(in[0]) != 0 || len(out) != len(in)-1 {
				t.Fatalf("req in %q out %q", in, out)
			}
		case s.kind == kSub:
			if !strings.HasPrefix(string(out[0]), "x") {
				t.Fatalf("sub delivered unsubscribed %q", out)
			}
		case s.kind == kPush:
			t.Fatal("push delivered a message")
		default:
			if len(out) != len(in) {
				t.Fatalf("out %q in %q", out, in)
			}
		}
	})
}

package socket

import (
	"fmt"
	"os"
	"testing"
)

// xpubIndexFixture builds an XPUB socket's topic index with subs
// subscribers holding perSub distinct topics each ("eng.<sub>.<i>") plus,
// for every tenth subscriber, "stats".
func xpubIndexFixture(tb testing.TB, subs, perSub int) (*Socket, []*peerConn) {
	tb.Helper()
	o := DefaultOptions()
	o.XPubMaxTopics = -1
	o.XPubMaxTopicBytes = -1
	s, err := newSocket(kXPub, o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	peers := make([]*peerConn, subs)
	buf := make([]byte, 0, 64)
	for i := range peers {
		p := newPeerConn(s, nil, &Peer{id: uint64(i + 1)}, nil)
		peers[i] = p
		if i%10 == 0 && !p.applySub([]byte("\x01stats")) {
			tb.Fatal("stats refused")
		}
		n := perSub
		if i%10 == 0 && n >= maxTopicsPerPeer {
			n = maxTopicsPerPeer - 1 // "stats" is one of its topics
		}
		for j := range n {
			buf = fmt.Appendf(append(buf[:0], 1), "eng.%d.%d", i, j)
			if !p.applySub(buf) {
				tb.Fatalf("subscription %d/%d refused", i, j)
			}
		}
	}
	return s, peers
}

// fanoutSizes are the topics per subscriber the fan-out benchmarks use,
// with 1,000 subscribers: 1,000 × 10,000 (10 million topics, about 2 GiB
// to set up) only with ZMQGUARD_BENCH_FULL=1.
func fanoutSizes() []int {
	if os.Getenv("ZMQGUARD_BENCH_FULL") != "" {
		return []int{1, 100, 1000, 10000}
	}
	return []int{1, 100}
}

// BenchmarkXPubMatch measures matching one publication against 1,000
// subscribers: "stats/..." matches 100 of them, "eng.7.3/..." one. Its
// cost must not grow with the topics per subscriber.
func BenchmarkXPubMatch(b *testing.B) {
	for _, per := range fanoutSizes() {
		s, _ := xpubIndexFixture(b, 1000, per)
		for _, pub := range []string{"stats/engine", "eng.7.0/kv"} {
			b.Run(fmt.Sprintf("topics=%dx%d/%s", 1000, per, pub[:4]), func(b *testing.B) {
				f := []byte(pub)
				var dst []*peerConn
				b.ReportAllocs()
				for b.Loop() {
					dst = s.topicIdx.match(f, dst[:0])
				}
				if want := map[string]int{"stat": 100, "eng.": 1}[pub[:4]]; len(dst) != want {
					b.Fatalf("matched %d subscribers, want %d", len(dst), want)
				}
			})
		}
	}
}

// BenchmarkXPubDeparture measures a subscriber with per topics leaving a
// socket of 1,000 subscribers: its cost is its own topics.
func BenchmarkXPubDeparture(b *testing.B) {
	for _, per := range fanoutSizes() {
		b.Run(fmt.Sprintf("topics=%dx%d", 1000, per), func(b *testing.B) {
			s, peers := xpubIndexFixture(b, 1000, per)
			i := 0
			for b.Loop() {
				p := peers[i%len(peers)]
				i++
				b.StopTimer()
				if p.topics == nil {
					p.topics = make(map[string]topicRef)
					buf := make([]byte, 0, 64)
					for j := range per {
						p.applySub(fmt.Appendf(append(buf[:0], 1), "eng.x%d.%d", i, j))
					}
				}
				b.StartTimer()
				p.dropTopics()
			}
			if s.topicIdx.count < 0 {
				b.Fatal("negative count")
			}
		})
	}
}

// BenchmarkXPubMatchScan is the matching the index replaced, for
// comparison: every subscriber's every topic tested against the
// publication.
func BenchmarkXPubMatchScan(b *testing.B) {
	for _, per := range fanoutSizes() {
		_, peers := xpubIndexFixture(b, 1000, per)
		b.Run(fmt.Sprintf("topics=%dx%d", 1000, per), func(b *testing.B) {
			f := []byte("eng.7.0/kv")
			n := 0
			for b.Loop() {
				n = 0
				for _, p := range peers {
					for t := range p.topics {
						if len(t) <= len(f) && string(f[:len(t)]) == t {
							n++
							break
						}
					}
				}
			}
			if n != 1 {
				b.Fatalf("matched %d", n)
			}
		})
	}
}

package metrics

import (
	"fmt"
	"testing"

	"github.com/zmqguard/zmqguard/decodeguard"
)

// BenchmarkCollectSources1000 is one scrape's work for a source set of
// 1,000 sources under the default label cap (100 labelled, 900 folded).
func BenchmarkCollectSources1000(b *testing.B) {
	list := make([]Source, 1000)
	for i := range list {
		list[i] = Source{Name: fmt.Sprintf("tcp://10.0.%d.%d:5557", i/256, i%256), Received: uint64(i), Connected: true}
		list[i].Dropped[decodeguard.ReasonDecode] = 1
	}
	s := NewSet()
	if err := s.AddSources("kv", 0, func() []Source { return list }); err != nil {
		b.Fatal(err)
	}
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		s.Collect(func(Sample) { n++ })
	}
	if n == 0 {
		b.Fatal("no samples")
	}
}

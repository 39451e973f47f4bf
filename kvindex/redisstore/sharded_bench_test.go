package redisstore

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/kvload"
	"github.com/zmqguard/zmqguard/internal/testkit/redistest"
	"github.com/zmqguard/zmqguard/kvindex"
)

// fullWalk hides a sharded store's PrefixHolders: an Index on it scores
// with Holders, every shard reading the whole prompt (the walk before
// issue 41's session 9).
type fullWalk struct{ kvindex.Backend }

// shardFixture is BenchmarkShardedScore's data, built once per test
// binary (every -count round measures the same stores) and closed by
// TestMain.
var shardFixture struct {
	once    sync.Once
	err     error
	indexes []*kvindex.Index  // one slot, 16 shards, 16 shards walked in full
	stores  []kvindex.Backend // the indexes' stores (an Index leaves them open)
	names   []string
	fleet   kvload.Fleet
	entries int
}

// closeShardFixture closes what BenchmarkShardedScore built; false when
// it built nothing.
func closeShardFixture() bool {
	f := &shardFixture
	built := len(f.indexes) > 0 || len(f.stores) > 0
	for _, x := range f.indexes {
		x.Close()
	}
	for _, be := range f.stores {
		be.Close()
	}
	f.indexes, f.stores = nil, nil
	return built
}

// buildShardFixture builds kvindex's fleet into a store in one slot and
// into a store of 16 shards, on the test binary's 3-node cluster, through
// an Index each.
func buildShardFixture(b *testing.B) error {
	f := &shardFixture
	f.fleet = kvload.Fleet{Engines: *fleetEngines, Blocks: *fleetBlocks, BlockSize: 64, PromptBlocks: 128, Holders: 32, ChainBlocks: 128}
	url := redistest.RequireCluster(b).URL()
	prefix := "{" + NewWriterID() + "}"
	var sharded kvindex.Backend
	for _, shards := range []int{1, 16} {
		be, err := New(Config{URL: url, Prefix: prefix + strconv.Itoa(shards), Capacity: 4 * f.fleet.Blocks, Shards: shards})
		if err != nil {
			return err
		}
		f.stores = append(f.stores, be)
		if shards == 16 {
			sharded = be
		}
		x, err := kvindex.New(kvindex.Config{Backend: be})
		if err != nil {
			return err
		}
		f.indexes = append(f.indexes, x)
		if f.entries, err = f.fleet.Build(x); err != nil {
			return err
		}
	}
	x, err := kvindex.New(kvindex.Config{Backend: fullWalk{sharded}})
	if err != nil {
		return err
	}
	f.indexes = append(f.indexes, x)
	f.names = []string{"1-shard", "16-shards", "16-shards-fullwalk"}
	// Same data: the three answer the same, for each prompt.
	for _, p := range shardPrompts {
		var first string
		for i, x := range f.indexes {
			r, err := x.Score(shardFixtureRequest(p.diverge))
			if err != nil {
				return err
			}
			want := min(p.diverge, f.fleet.PromptBlocks)
			if best, ok := r.Best(); want > 0 && (!ok || best.Blocks != want || len(r.Engines) < f.fleet.Holders) ||
				want == 0 && len(r.Engines) != 0 {
				return fmt.Errorf("%s scored the %s prompt wrong: %d engines, best %+v", f.names[i], p.name, len(r.Engines), best)
			}
			if s := fmt.Sprint(r); i == 0 {
				first = s
			} else if s != first {
				return fmt.Errorf("%s answers %s for the %s prompt, one slot %s", f.names[i], s, p.name, first)
			}
		}
	}
	return nil
}

// shardPrompts are the prompts BenchmarkShardedScore scores: the fleet's
// (its holders hold prefixes of 1..128 blocks of it), one that leaves it
// after 8 blocks (a cached system prompt, a new question: every holder's
// prefix is at most 8 blocks) and one that leaves it at once (nobody holds
// any of it).
var shardPrompts = []struct {
	name    string
	diverge int // the first block that differs from the fleet's prompt
}{{"prompt", 1 << 30}, {"leaves-at-8", 8}, {"miss", 0}}

// shardFixtureRequest scores the fleet's prompt with its tokens from block
// diverge on changed.
func shardFixtureRequest(diverge int) kvindex.ScoreRequest {
	f := shardFixture.fleet
	toks := f.Prompt()
	if i := diverge * f.BlockSize; i < len(toks) {
		toks[i]++
	}
	return kvindex.ScoreRequest{Tokens: toks, BlockSize: f.BlockSize}
}

// clusterCPU returns the CPU time (user + system) the cluster's nodes
// used so far (INFO cpu).
func clusterCPU(b *testing.B) time.Duration {
	c := redistest.RequireCluster(b)
	var t time.Duration
	for i := range c.Nodes {
		info, err := c.Do(i, "INFO", "cpu")
		if err != nil {
			b.Fatal(err)
		}
		for _, l := range strings.Split(info, "\n") {
			k, v, _ := strings.Cut(strings.TrimSpace(l), ":")
			if k == "used_cpu_user" || k == "used_cpu_sys" {
				s, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatalf("INFO cpu: %q", l)
				}
				t += time.Duration(s * 1e9)
			}
		}
	}
	return t
}

// clusterHGETs returns the HGET calls the cluster's nodes served so far
// (INFO commandstats counts a script's calls): the keys Score walks, which
// the machine's load does not change.
func clusterHGETs(b *testing.B) int64 {
	c := redistest.RequireCluster(b)
	var n int64
	for i := range c.Nodes {
		info, err := c.Do(i, "INFO", "commandstats")
		if err != nil {
			b.Fatal(err)
		}
		for _, l := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "cmdstat_hget:calls="); ok {
				v, _, _ = strings.Cut(v, ",")
				k, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					b.Fatalf("INFO commandstats: %q", l)
				}
				n += k
			}
		}
	}
	return n
}

// processCPU returns this process's CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkShardedScore: Score latency (p50, p99), CPU per Score (the
// cluster's nodes, this process) and the keys read per Score (hget/op) of kvindex's fleet (BenchmarkScoreFleet's
// shape) on the 3-node test cluster, the same data in one slot and in 16
// shards, and the 16 shards walked as before session 9 (every shard
// reading the whole prompt), side by side in one run, for three prompts
// (shardPrompts). The fleet is built once per test binary; run with
// -count for benchstat.
func BenchmarkShardedScore(b *testing.B) {
	shardFixture.once.Do(func() { shardFixture.err = buildShardFixture(b) })
	if shardFixture.err != nil {
		b.Fatal(shardFixture.err)
	}
	for _, p := range shardPrompts {
		b.Run(p.name, func(b *testing.B) { benchShardedScore(b, shardFixtureRequest(p.diverge)) })
	}
}

// benchShardedScore scores req on each of the fixture's indexes.
func benchShardedScore(b *testing.B, req kvindex.ScoreRequest) {
	for i, x := range shardFixture.indexes {
		b.Run(shardFixture.names[i], func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			srv0, cli0, hg0 := clusterCPU(b), processCPU(), clusterHGETs(b)
			b.ResetTimer()
			for b.Loop() {
				t := time.Now()
				if _, err := x.Score(req); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t))
			}
			b.StopTimer()
			srv, cli, hg := clusterCPU(b)-srv0, processCPU()-cli0, clusterHGETs(b)-hg0
			slices.Sort(lat)
			n := float64(len(lat))
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
			b.ReportMetric(float64(srv.Nanoseconds())/1e3/n, "redis-cpu-µs/op")
			b.ReportMetric(float64(cli.Nanoseconds())/1e3/n, "client-cpu-µs/op")
			b.ReportMetric(float64(hg)/n, "hget/op")
			b.ReportMetric(float64(shardFixture.entries), "entries")
		})
	}
}

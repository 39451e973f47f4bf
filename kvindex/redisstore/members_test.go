package redisstore

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/internal/testkit/redistest"
	"github.com/zmqguard/zmqguard/kvindex"
)

// replica is one store of a shared-ingest test and what it follows.
type replica struct {
	s    *store
	b    kvindex.Backend
	held map[string]bool // followed: held and not handed back
}

func newReplica(t *testing.T, prefix, id string, ttl time.Duration, shards int) *replica {
	t.Helper()
	if shards <= 1 {
		s := newStore(t, Config{Prefix: prefix, WriterID: id, LeaseTTL: ttl})
		return &replica{s: s, b: s, held: map[string]bool{}}
	}
	b, err := New(Config{URL: redistest.Require(t).URL(), Prefix: prefix, WriterID: id, LeaseTTL: ttl, Shards: shards})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return &replica{b: b, held: map[string]bool{}}
}

// round is what kv-index does each tick: Rebalance, hand back the excess,
// follow the rest.
func (r *replica) round(t *testing.T, engines []string) Split {
	t.Helper()
	sp, err := Rebalance(r.b, engines)
	if err != nil {
		t.Fatal(err)
	}
	clear(r.held)
	for _, e := range sp.Held {
		r.held[e] = true
	}
	for _, e := range sp.Excess {
		delete(r.held, e)
		if err := Release(r.b, e); err != nil {
			t.Fatal(err)
		}
	}
	return sp
}

func engineNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("engine-%d", i)
	}
	return out
}

// split checks that the replicas follow every engine exactly once and
// returns how many each follows, or an error saying what is wrong.
func split(rs []*replica, engines []string) ([]int, error) {
	owner := map[string]int{}
	var sizes []int
	for i, r := range rs {
		sizes = append(sizes, len(r.held))
		for e := range r.held {
			if j, dup := owner[e]; dup {
				return sizes, fmt.Errorf("engine %s followed by replicas %d and %d", e, j, i)
			}
			owner[e] = i
		}
	}
	for _, e := range engines {
		if _, ok := owner[e]; !ok {
			return sizes, fmt.Errorf("engine %s followed by nobody (sizes %v)", e, sizes)
		}
	}
	return sizes, nil
}

// TestRebalanceSplits: a first replica takes every engine; replicas that
// join get a share (the first hands back its excess) until each holds
// len/members (one more for the first ids), never one engine twice; the
// lease refuses a second writer throughout. Both on one store and on a
// sharded one (leases in each engine's shard, membership in shard 0).
func TestRebalanceSplits(t *testing.T) {
	for _, shards := range []int{1, 4} {
		t.Run(fmt.Sprint("shards=", shards), func(t *testing.T) {
			prefix := "{" + redistest.Prefix(t) + "}"
			engines := engineNames(7)
			a := newReplica(t, prefix, "a", time.Minute, shards)
			if sp := a.round(t, engines); len(sp.Held) != 7 || len(sp.Excess) != 0 || sp.Members != 1 {
				t.Fatalf("alone: %+v, want all 7 held", sp)
			}
			rs := []*replica{a, newReplica(t, prefix, "b", time.Minute, shards), newReplica(t, prefix, "c", time.Minute, shards)}
			want := []int{3, 2, 2}
			var sizes []int
			var err error
			for range 4 {
				for _, r := range rs {
					r.round(t, engines)
					if _, err := split(rs, nil); err != nil {
						t.Fatal(err) // never one engine followed twice
					}
				}
				if sizes, err = split(rs, engines); err == nil && slices.Equal(sizes, want) {
					break
				}
			}
			if err != nil || !slices.Equal(sizes, want) {
				t.Fatalf("after the joins: sizes %v, %v; want %v and every engine once", sizes, err, want)
			}
			// Every replica's Apply writes only its own engines.
			for i, r := range rs {
				for _, e := range engines {
					before, _ := StatsOf(r.b)
					if _, err := r.b.Apply(e, []kvindex.Op{{Kind: kvindex.OpStore, Hash: 1, Key: 1, Medium: "GPU"}}); err != nil {
						t.Fatal(err)
					}
					after, _ := StatsOf(r.b)
					if refused := after.NotWriter > before.NotWriter; refused == r.held[e] {
						t.Fatalf("replica %d engine %s: refused %v, held %v", i, e, refused, r.held[e])
					}
				}
			}
		})
	}
}

// TestReleaseThenLateApply: after Release, a late batch of the engine is
// refused by the store (not written, and the lease not taken back by it),
// so that another replica takes the engine at its next round.
func TestReleaseThenLateApply(t *testing.T) {
	prefix := "{" + redistest.Prefix(t) + "}"
	a := newReplica(t, prefix, "a", time.Minute, 1)
	b := newReplica(t, prefix, "b", time.Minute, 1)
	engines := []string{"e", "f"}
	if sp := a.round(t, engines); len(sp.Held) != 2 {
		t.Fatalf("a alone: %+v", sp)
	}
	if sp := b.round(t, engines); len(sp.Held) != 0 || sp.Quota != 1 {
		t.Fatalf("b joining: %+v, want a quota of 1 and nothing free", sp)
	}
	if sp := a.round(t, engines); !slices.Equal(sp.Excess, []string{"f"}) {
		t.Fatalf("a after b joined: %+v, want f handed back", sp)
	}
	if _, err := a.b.Apply("f", []kvindex.Op{{Kind: kvindex.OpStore, Hash: 1, Key: 11, Medium: "GPU"}}); err != nil {
		t.Fatal(err)
	}
	if st := a.s.ownStats(); st.NotWriter != 1 {
		t.Fatalf("late apply after Release: %+v, want refused (not_writer 1)", st)
	}
	if sp := b.round(t, engines); !slices.Equal(sp.Held, []string{"f"}) {
		t.Fatalf("b after a's release: %+v, want f held", sp)
	}
	if got := trusted(t, b.s, 11); len(got) != 0 {
		t.Fatalf("key 11 holders %v: the late batch was written", got)
	}
}

// TestTakeoverOfDeadReplica: a replica that stops (no Leave: a crash)
// loses its engines to the others once its heartbeat and leases expire,
// and what it had stored reads as uncertain after the takeover: the new
// writer cannot prove the engine still holds it.
func TestTakeoverOfDeadReplica(t *testing.T) {
	prefix := "{" + redistest.Prefix(t) + "}"
	const ttl = 300 * time.Millisecond
	engines := engineNames(4)
	a := newReplica(t, prefix, "a", ttl, 1)
	b := newReplica(t, prefix, "b", ttl, 1)
	for range 3 {
		a.round(t, engines)
		b.round(t, engines)
	}
	if sizes, err := split([]*replica{a, b}, engines); err != nil || !slices.Equal(sizes, []int{2, 2}) {
		t.Fatalf("before the crash: %v %v", sizes, err)
	}
	var dead []string
	before := b.s.ownStats().Takeovers
	for e := range a.held {
		dead = append(dead, e)
		if _, err := a.b.Apply(e, []kvindex.Op{{Kind: kvindex.OpStore, Hash: 7, Key: 77, Medium: "GPU"}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := trusted(t, b.s, 77); len(got) != 2 || !got[0] || !got[1] {
		t.Fatalf("a's entries before the crash: %v, want 2 trusted", got)
	}
	a.s.Close() // renewal stops, no Leave
	poll.WaitFor(t, 30*ttl, "b takes a's engines over", func() bool {
		b.round(t, engines)
		return len(b.held) == 4
	})
	if got := trusted(t, b.s, 77); len(got) != 2 || got[0] || got[1] {
		t.Fatalf("a's entries after the takeover: %v, want 2 uncertain", got)
	}
	if st := b.s.ownStats(); st.Takeovers != before+2 {
		t.Fatalf("b's stats %+v, want 2 more takeovers than %d (%v)", st, before, dead)
	}
}

// TestLeave: a replica that leaves hands its engines over at once (no
// wait for the lease TTL: a minute here).
func TestLeave(t *testing.T) {
	prefix := "{" + redistest.Prefix(t) + "}"
	engines := engineNames(4)
	a := newReplica(t, prefix, "a", time.Minute, 1)
	b := newReplica(t, prefix, "b", time.Minute, 1)
	for range 3 {
		a.round(t, engines)
		b.round(t, engines)
	}
	if err := Leave(a.b); err != nil {
		t.Fatal(err)
	}
	if sp := b.round(t, engines); len(sp.Held) != 4 || sp.Members != 1 {
		t.Fatalf("after a left: %+v, want every engine held by b alone", sp)
	}
	if st := a.s.ownStats(); st.NotWriter != 0 {
		t.Fatal(st)
	}
	if _, err := a.b.Apply("engine-0", nil); err != nil || a.s.ownStats().NotWriter != 1 {
		t.Fatalf("apply after Leave: %v %+v, want refused", err, a.s.ownStats())
	}
}

// TestRebalanceNeedsWriter: without a WriterID there is no lease to
// share.
func TestRebalanceNeedsWriter(t *testing.T) {
	s := newStore(t, Config{})
	if _, err := Rebalance(s, []string{"e"}); err == nil {
		t.Fatal("Rebalance without WriterID: no error")
	}
}

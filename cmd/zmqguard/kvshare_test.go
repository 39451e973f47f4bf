package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/ref/kvmodel"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/internal/testkit/redistest"
	"github.com/zmqguard/zmqguard/kvevents"
)

// shareFollowing returns the engines a --share-ingest replica follows
// (/stats share.following).
func shareFollowing(t *testing.T, addr string) []string {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + addr + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Share *kvShareStats `json:"share"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || st.Share == nil {
		t.Fatalf("/stats: %v, share %v", err, st.Share)
	}
	return st.Share.Following
}

// TestKVIndexShareIngest: kv-index replicas with --share-ingest split four
// engines by their leases. One replica alone follows all four; a second
// that joins gets two (the first hands them back: never one engine
// followed by both, never one followed by none once settled); both score
// every engine from the shared index. When one is killed (no goodbye),
// the other takes its engines over within a bound, and what the killed
// one had stored reads as uncertain (maybe blocks, no certain one): the
// survivor has no continuity with it. What comes next is certain again.
func TestKVIndexShareIngest(t *testing.T) {
	srv := redistest.StartT(t)
	const bs, nEngines = 16, 4
	var pubs []*kvevents.Publisher
	var engines []string
	for range nEngines {
		pub, err := kvevents.NewPublisher(kvevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Bind: true, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		defer pub.Close()
		pubs = append(pubs, pub)
		engines = append(engines, pub.Endpoint())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	args := []string{"kv-index", "--http", "127.0.0.1:0", "--redis", srv.URL(), "--share-ingest", "--redis-lease-ttl", "1500ms",
		"--log-format", "json"}
	for _, e := range engines {
		args = append(args, "--connect", e)
	}
	startReplica := func() (*proc, string) {
		p := start(t, ctx, args...)
		return p, p.logField("kv-index endpoint serving", "http_addr", 20*time.Second)
	}
	doc := func(round, engine int) []int64 { return kvmodel.Tokens(100*round+engine, 4*bs) }
	hashes := func(round, engine int) []uint64 {
		b := uint64(1000*round + 10*engine)
		return []uint64{b, b + 1, b + 2, b + 3}
	}
	// publish stores round's document on engine i until the replicas
	// addrs score it certain there (4 blocks); PUB drops a batch sent
	// before the subscription is up, so it is sent again.
	publish := func(round, i int, addrs ...string) {
		t.Helper()
		poll.WaitFor(t, 30*time.Second, fmt.Sprintf("round %d on engine %d scored", round, i), func() bool {
			pubs[i].Publish(kvmodel.Store(hashes(round, i), -1, doc(round, i), bs, "GPU", 0))
			time.Sleep(20 * time.Millisecond)
			for _, a := range addrs {
				_, r, _ := postScore(t, a, tokensJSON(doc(round, i)))
				if r.Best == nil || r.Best.Engine != engines[i] || r.Best.Blocks != 4 {
					return false
				}
			}
			return true
		})
	}
	// uncertain reports whether addr scores round's document on engine i
	// as 4 maybe blocks and no certain one.
	uncertain := func(addr string, round, i int) (bool, string) {
		_, r, raw := postScore(t, addr, tokensJSON(doc(round, i)))
		return r.Best == nil && len(r.Engines) == 1 && r.Engines[0].Engine == engines[i] && r.Engines[0].MaybeBlocks == 4 &&
			r.Engines[0].Blocks == 0, raw
	}
	a, addrA := startReplica()
	poll.WaitFor(t, 30*time.Second, "the first replica follows every engine", func() bool {
		return len(shareFollowing(t, addrA)) == nEngines
	})
	for i := range engines {
		publish(1, i, addrA)
	}

	b, addrB := startReplica()
	var fa, fb []string
	poll.WaitFor(t, 30*time.Second, "the joining replica gets half", func() bool {
		// An engine in both is an overlap only if the first replica
		// followed it before and after the second's answer (not one
		// handed over between the two reads).
		fa, fb = shareFollowing(t, addrA), shareFollowing(t, addrB)
		fa2 := shareFollowing(t, addrA)
		for _, e := range fa {
			if slices.Contains(fb, e) && slices.Contains(fa2, e) {
				t.Fatalf("engine %s followed by both replicas: %v / %v / %v", e, fa, fb, fa2)
			}
		}
		fa = fa2
		return len(fa) == nEngines/2 && len(fb) == nEngines/2
	})
	// The engines handed over: what the first replica stored there is
	// uncertain now (the second has no continuity with it).
	for i, e := range engines {
		if slices.Contains(fb, e) {
			if ok, raw := uncertain(addrA, 1, i); !ok {
				t.Fatalf("engine %d handed over: round 1 scores %s, want 4 maybe blocks and none certain", i, raw)
			}
		}
	}
	for i := range engines {
		publish(2, i, addrA, addrB)
	}
	if code := b.cmd.Process.Kill(); code != nil {
		t.Fatal(code)
	}
	b.wait(20 * time.Second)
	poll.WaitFor(t, 30*time.Second, "the survivor takes the killed replica's engines", func() bool {
		return len(shareFollowing(t, addrA)) == nEngines
	})
	for i, e := range engines {
		ok, raw := uncertain(addrA, 2, i)
		if slices.Contains(fb, e) != ok {
			t.Fatalf("engine %d (the killed replica's: %v) after the takeover: round 2 scores %s; want uncertain exactly on the killed replica's engines",
				i, slices.Contains(fb, e), raw)
		}
	}
	for i := range engines {
		publish(3, i, addrA)
	}
	if code := a.terminate(20 * time.Second); code != 0 {
		t.Fatalf("exit %d\n%s", code, a.stderr)
	}
	if !strings.Contains(a.stderr.String(), "engine handed back") {
		t.Fatalf("no hand-back logged:\n%s", a.stderr)
	}
}

// TestKVIndexShareUsage: --share-ingest's flag checks.
func TestKVIndexShareUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--connect", "tcp://127.0.0.1:1", "--share-ingest"}, "needs --redis"},
		{[]string{"--redis", "unix:///nonexistent", "--share-ingest"}, "needs the engines"},
		{[]string{"--redis", "unix:///nonexistent", "--share-ingest", "--bind", "tcp://127.0.0.1:0"}, "--connect engines only"},
		{[]string{"--redis", "unix:///nonexistent", "--share-ingest", "--connect", "tcp://127.0.0.1:1", "--sources-file", "/dev/null"}, "not supported"},
	} {
		code, _, stderr := runBin(t, 20*time.Second, append([]string{"kv-index", "--http", "127.0.0.1:0"}, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, want 2 and %q\n%s", c.args, code, c.want, stderr)
		}
	}
}

// TestKVShareGate: with --share-ingest the handler applies only the
// engines the replica follows, and no UpdateDeparted (a handed-over engine
// did not leave); a stop waits for an update under way.
func TestKVShareGate(t *testing.T) {
	k := newKVShare(true, nil, nil, "w", time.Second, quietLogger())
	k.follow["a"] = true
	var got []string
	inside, release := make(chan struct{}), make(chan struct{})
	h := k.wrap(func(_ context.Context, u kvevents.Update) error {
		got = append(got, fmt.Sprint(u.Source, "/", u.Kind))
		if u.Kind == kvevents.UpdateLost {
			close(inside)
			<-release
		}
		return nil
	})
	h(context.Background(), kvevents.Update{Kind: kvevents.UpdateBatch, Source: "a"})
	h(context.Background(), kvevents.Update{Kind: kvevents.UpdateBatch, Source: "b"})
	h(context.Background(), kvevents.Update{Kind: kvevents.UpdateDeparted, Source: "a"})
	if want := []string{fmt.Sprint("a/", kvevents.UpdateBatch)}; !slices.Equal(got, want) {
		t.Fatalf("applied %v, want %v", got, want)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		h(context.Background(), kvevents.Update{Kind: kvevents.UpdateLost, Source: "a"})
	}()
	<-inside
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		k.mu.Lock() // what stop takes before the source goes
		delete(k.follow, "a")
		k.mu.Unlock()
	}()
	select {
	case <-stopped:
		t.Fatal("the gate closed while an update of the engine was being applied")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-done
	<-stopped
	h(context.Background(), kvevents.Update{Kind: kvevents.UpdateBatch, Source: "a"})
	if len(got) != 2 {
		t.Fatalf("applied %v after the stop, want nothing more", got)
	}
}

package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/ref/kvmodel"
	"github.com/zmqguard/zmqguard/kvevents"
)

// TestDNSFlag: --sources-dns takes tcp://NAME:PORT[,replay=PORT] and
// refuses anything else with a reason.
func TestDNSFlag(t *testing.T) {
	for in, want := range map[string]string{
		"tcp://engines.ns.svc:5557":              "engines.ns.svc 5557 0",
		"tcp://engines:5557,replay=5558":         "engines 5557 5558",
		"tcp://[fd00::1]:1,replay=65535":         "fd00::1 1 65535",
		"tcp://engines.ns.svc.cluster.local.:80": "engines.ns.svc.cluster.local. 80 0",
	} {
		d, err := parseDNSFlag(in)
		if err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		if got := d.Host + " " + strconv.Itoa(d.Port) + " " + strconv.Itoa(d.ReplayPort); got != want {
			t.Errorf("%s: %s, want %s", in, got, want)
		}
	}
	for _, in := range []string{"", "engines:5557", "udp://e:1", "tcp://e", "tcp://:5557", "tcp://*:5557", "tcp://e:0",
		"tcp://e:65536", "tcp://e:x", "tcp://e:1,replay=0", "tcp://e:1,replay=", "tcp://e:1,rep=2", "tcp://e:1,replay=2,x",
		"tcp://e\x1b:1"} {
		if _, err := parseDNSFlag(in); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

// FuzzDNSFlag: the --sources-dns parser never panics, and what it
// accepts has a name and ports in range and reads back the same when
// written out again.
func FuzzDNSFlag(f *testing.F) {
	for _, s := range []string{"tcp://engines:5557,replay=5558", "tcp://[::1]:1", "tcp://e:65536", "tcp://e:1,replay=x", "tcp://:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseDNSFlag(s)
		if err != nil {
			return
		}
		if d.Host == "" || d.Port < 1 || d.Port > 65535 || d.ReplayPort < 0 || d.ReplayPort > 65535 {
			t.Fatalf("%q accepted as %+v", s, d)
		}
		out := "tcp://" + net.JoinHostPort(d.Host, strconv.Itoa(d.Port))
		if d.ReplayPort != 0 {
			out += ",replay=" + strconv.Itoa(d.ReplayPort)
		}
		again, err := parseDNSFlag(out)
		if err != nil || again != d {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", s, d, out, again, err)
		}
	})
}

// TestDiscoveryUsage: bad discovery flags are usage errors (exit 2).
func TestDiscoveryUsage(t *testing.T) {
	for _, args := range [][]string{
		{"kv-index", "--sources-dns", "engines:5557", "--http", "127.0.0.1:0"},
		{"kv-index", "--sources-file", "x", "--dns-interval", "0", "--http", "127.0.0.1:0"},
		{"kv-events", "--sources-dns", "tcp://e:1,replay=0"},
		{"kv-events", "--sources-file", "x", "--dns-interval", "-1s"},
	} {
		if code, _, stderr := runBin(t, 20*time.Second, args...); code != 2 {
			t.Errorf("%v: exit %d (want 2)\n%s", args, code, stderr)
		}
	}
}

// statsNum reads one number of kv-index's /stats.
func statsNum(t *testing.T, addr, key string) float64 {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + addr + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st map[string]any
	json.NewDecoder(resp.Body).Decode(&st)
	return num(st, key)
}

// TestKVIndexDiscovery: kv-index follows the engines of --sources-file
// (edited while it runs, replaced by a rename) and of --sources-dns
// (localhost, from /etc/hosts: an address, no DNS server needed): an
// engine taken out of the file stops scoring, counted in index.departed.
func TestKVIndexDiscovery(t *testing.T) {
	const bs = 16
	newPub := func(ep string) *kvevents.Publisher {
		p, err := kvevents.NewPublisher(kvevents.PublisherConfig{Endpoint: ep, Bind: true, ReplayEndpoint: "tcp://127.0.0.1:0", Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	a, b, c := newPub("tcp://127.0.0.1:0"), newPub("tcp://127.0.0.1:0"), newPub("tcp://127.0.0.1:0")
	docs := map[*kvevents.Publisher][]int64{a: kvmodel.Tokens(11, 4*bs), b: kvmodel.Tokens(12, 4*bs), c: kvmodel.Tokens(13, 4*bs)}
	for p, doc := range docs {
		var hs []kvevents.Hash
		for i := range 4 {
			hs = append(hs, kvevents.IntHash(uint64(1000*len(doc)+i)+uint64(doc[0])))
		}
		if err := p.Publish(kvevents.Event{Type: kvevents.BlockStored, BlockSize: bs, TokenIDs: doc, BlockHashes: hs}); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(t.TempDir(), "engines")
	line := func(p *kvevents.Publisher) string { return p.Endpoint() + " " + p.ReplayEndpoint() + "\n" }
	if err := os.WriteFile(file, []byte("# pool\n"+line(a)+"bad line here\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, cport, _ := net.SplitHostPort(strings.TrimPrefix(c.Endpoint(), "tcp://"))
	_, crport, _ := net.SplitHostPort(strings.TrimPrefix(c.ReplayEndpoint(), "tcp://"))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	p := start(t, ctx, "kv-index", "--sources-file", file, "--sources-dns", "tcp://localhost:"+cport+",replay="+crport,
		"--dns-interval", "100ms", "--http", "127.0.0.1:0", "--log-format", "json")
	addr := p.logField("kv-index endpoint serving", "http_addr", 20*time.Second)
	// Publishing (empty batches) shows the subscriber what it missed.
	go func() {
		for ctx.Err() == nil {
			for pub := range docs {
				pub.Publish()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	cName := "tcp://127.0.0.1:" + cport
	waitBest(t, addr, docs[a], a.Endpoint(), 4)
	waitBest(t, addr, docs[c], cName, 4)
	waitBest(t, addr, docs[b], "", 0)
	if !strings.Contains(p.stderr.String(), `"line":3`) {
		t.Errorf("the bad line's number is not logged:\n%s", p.stderr)
	}
	// Replaced by a rename: b instead of a.
	if err := os.WriteFile(file+".tmp", []byte(line(b)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(file+".tmp", file); err != nil {
		t.Fatal(err)
	}
	waitBest(t, addr, docs[b], b.Endpoint(), 4)
	waitBest(t, addr, docs[a], "", 0)
	waitBest(t, addr, docs[c], cName, 4)
	if n := statsNum(t, addr, "index.departed"); n != 1 {
		t.Fatalf("index.departed %v, want 1", n)
	}
	if code := p.terminate(20 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM\nstderr:\n%s", code, p.stderr)
	}
}

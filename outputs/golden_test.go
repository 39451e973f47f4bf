package outputs

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/internal/testkit/golden"
	"github.com/zmqguard/zmqguard/internal/testkit/pypeer"
	"github.com/zmqguard/zmqguard/socket"
)

// goldenReceived is what the handler kept of each message: the Encoder's
// frames for it (proven byte-identical to vLLM's by enginecore's golden
// test, so equal frames mean every value was decoded).
// goldenEngines is how many engine indices the vectors claim (0 and 1). They
// are replayed over one connection, which therefore holds both, and the
// ENGINE_CORE_DEAD sent after them marks both dead (issue 29: a sentinel
// speaks for the engines its connection has claimed).
const goldenEngines = 2

type goldenReceived struct {
	mu     sync.Mutex
	frames [][][]byte
	notes  []Notification
	dead   int
}

func (g *goldenReceived) config(done context.CancelFunc, want int) Config {
	var enc enginecore.Encoder
	return Config{
		Handler: func(_ context.Context, m *enginecore.Message, _ *socket.Peer) error {
			f := enc.Encode(m)
			cp := make([][]byte, len(f))
			for i := range f {
				cp[i] = bytes.Clone(f[i])
			}
			g.mu.Lock()
			g.frames = append(g.frames, cp)
			g.mu.Unlock()
			return nil
		},
		OnNotification: func(n Notification) {
			g.mu.Lock()
			g.notes = append(g.notes, n)
			g.mu.Unlock()
		},
		OnEngineDead: func(EngineDeadError) {
			g.mu.Lock()
			g.dead++
			all := g.dead == goldenEngines
			g.mu.Unlock()
			if all {
				done()
			}
		},
	}
}

func (g *goldenReceived) check(t *testing.T, vs []golden.Vector) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.frames) != len(vs) || g.dead != goldenEngines {
		t.Fatalf("delivered %d messages and %d engine deaths, want %d and %d", len(g.frames), g.dead, len(vs), goldenEngines)
	}
	for i, v := range vs {
		want, err := v.Frames()
		if err != nil {
			t.Fatal(err)
		}
		got := g.frames[i]
		if len(got) != len(want) {
			t.Errorf("%s: %d frames, vLLM sent %d", v.ID, len(got), len(want))
			continue
		}
		for j := range want {
			if !bytes.Equal(got[j], want[j]) {
				t.Errorf("%s: frame %d re-encoded differs from vLLM's", v.ID, j)
			}
		}
	}
	wantNotes := []Notification{
		{Engine: 1, CallID: -1, EEP: &enginecore.EEPNotification{Type: "RECONFIGURE_FINISHED", DPRank: 1}},
		{Engine: 1, CallID: -1, EEP: &enginecore.EEPNotification{Type: "SHUTDOWN_COMPLETE", DPRank: 1}},
		{Engine: 0, CallID: -2, FT: &enginecore.FTStatus{Status: "unhealthy", HasFaultInfo: true, FaultInfo: "RuntimeError"}},
		{Engine: 0, CallID: -2, FT: &enginecore.FTStatus{Status: "healthy"}},
	}
	if len(g.notes) != len(wantNotes) {
		t.Fatalf("%d notifications, want %d", len(g.notes), len(wantNotes))
	}
	for i, w := range wantNotes {
		n := g.notes[i]
		if n.Engine != w.Engine || n.CallID != w.CallID || (w.EEP == nil) != (n.EEP == nil) || (w.FT == nil) != (n.FT == nil) ||
			(w.EEP != nil && *w.EEP != *n.EEP) || (w.FT != nil && *w.FT != *n.FT) || n.Peer == "" {
			t.Errorf("notification %d: %+v (EEP %+v FT %+v), want %+v", i, n, n.EEP, n.FT, w)
		}
	}
}

func outputVectors(t *testing.T) []golden.Vector {
	var vs []golden.Vector
	for _, v := range golden.Load(t, "engine-outputs") {
		if v.Message() == "engine_core_outputs" {
			vs = append(vs, v)
		}
	}
	return vs
}

// TestGoldenReplayGo: every engine-outputs vector (vLLM's own bytes) sent
// by a Go PUSH after a junk frame reaches the handler whole (elastic-EP and
// fault-tolerance notifications included, which the receiver refused while
// call ids had to be unsigned), then ENGINE_CORE_DEAD.
func TestGoldenReplayGo(t *testing.T) {
	vs := outputVectors(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rctx, done := context.WithCancel(ctx)
	defer done()
	var g goldenReceived
	r, wait := start(t, rctx, g.config(done, len(vs)))
	p := pusher(t, r.Endpoint())
	defer p.Close()
	send(t, ctx, p, []byte{0x45})
	for _, v := range vs {
		f, err := v.Frames()
		if err != nil {
			t.Fatal(err)
		}
		send(t, ctx, p, f...)
	}
	send(t, ctx, p, []byte(engineCoreDead))
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	g.check(t, vs)
	if st := r.Stats(); st.Dropped.Total() != 1 {
		t.Errorf("dropped %v, want the junk frame only", st.Dropped)
	}
}

// TestGoldenReplayPython: the same vectors sent through libzmq (pyzmq).
func TestGoldenReplayPython(t *testing.T) {
	vs := outputVectors(t)
	py := pypeer.Require(t, "zmq", "msgpack", "numpy") // testdata/engine.py imports all three
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rctx, done := context.WithCancel(ctx)
	defer done()
	var g goldenReceived
	r, wait := start(t, rctx, g.config(done, len(vs)))
	out, err := exec.CommandContext(ctx, py, filepath.Join("testdata", "engine.py"), "replay", r.Endpoint(),
		filepath.Join(golden.Dir(), "engine-outputs.jsonl")).Output()
	if err != nil {
		t.Fatalf("python replay: %v", err)
	}
	if n := len(strings.Fields(string(out))); n != len(vs) {
		t.Fatalf("python sent %d vectors, want %d", n, len(vs))
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	g.check(t, vs)
}

// TestGoldenEngineCoreDead: vLLM's death notice is the single frame
// EngineCoreDead.
func TestGoldenEngineCoreDead(t *testing.T) {
	n := 0
	for _, v := range golden.Load(t, "engine-outputs") {
		if v.Message() != "engine_core_dead" {
			continue
		}
		n++
		f, err := v.Frames()
		if err != nil {
			t.Fatal(err)
		}
		if len(f) != 1 || !bytes.Equal(f[0], []byte(engineCoreDead)) {
			t.Fatalf("%s: frames %x, engineCoreDead %x", v.ID, f, engineCoreDead)
		}
	}
	if n != 1 {
		t.Fatalf("%d engine_core_dead vectors, want 1", n)
	}
}

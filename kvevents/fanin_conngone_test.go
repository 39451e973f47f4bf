package kvevents

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/internal/testkit/pypeer"
)

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) contains(s string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Contains(b.buf.Bytes(), []byte(s))
}

// TestFanInConnGone: a pyzmq PUB (libzmq) connects into a fan-in source,
// publishes its topic, and closes while its later messages still wait in
// the fan-in's queue (the Handler holds the first). The close releases
// the topic (no holder, the engine disconnected); the queued messages
// are refused as conn_gone (counted in RefusedBy.ConnGone and logged),
// never taken for a new connection that would hold the topic for good;
// and EngineTTL later the engine is retired: one UpdateDeparted, its
// topic forgotten (FanIn.Departed 1, Topics 0).
func TestFanInConnGone(t *testing.T) {
	const topic = "kv@127.0.0.1@m"
	release := make(chan struct{})
	var mu sync.Mutex
	var kinds []string
	handler := func(ctx context.Context, u Update) error {
		if u.Source != topic {
			return nil
		}
		mu.Lock()
		kinds = append(kinds, u.Kind)
		first := len(kinds) == 1
		mu.Unlock()
		if first {
			select { // hold the fan-in's loop: what follows stays queued
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	}
	updates := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), kinds...)
	}
	logs := &syncBuffer{}
	sub, err := NewSubscriber(Config{Handler: handler, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		EngineTTL: 300 * time.Millisecond, Topic: "kv@"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	defer func() {
		sub.Close()
		<-done
	}()
	if err := sub.Add(Source{Name: "fan", Live: "tcp://127.0.0.1:0", FanIn: true}); err != nil {
		t.Fatal(err)
	}
	fan := func() SourceStats {
		for _, s := range sub.Stats().Sources {
			if s.Name == "fan" {
				return s
			}
		}
		t.Fatal("no fan-in source in Stats")
		return SourceStats{}
	}
	engine := func() (SourceStats, bool) {
		for _, s := range sub.Stats().Sources {
			if s.Name == topic {
				return s, true
			}
		}
		return SourceStats{}, false
	}

	// The engine: pyzmq (libzmq), testdata/fanin_close.py.
	py := pypeer.Require(t, "zmq")
	cmd := exec.CommandContext(ctx, py, filepath.Join("testdata", "fanin_close.py"), sub.Endpoint("fan"), topic)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		in.Close()
		_ = cmd.Wait()
	}()
	out := bufio.NewScanner(outPipe)
	answer := func(what string) {
		t.Helper()
		if !out.Scan() || out.Text() != "ok" {
			t.Fatalf("fanin_close.py %s: %q %v %s", what, out.Text(), out.Err(), stderr.String())
		}
	}
	answer("start")
	var seq uint64
	send := func() {
		t.Helper()
		payload := AppendBatch(nil, float64(seq), []Event{storedEvent(seq)}, Opt[int64]{}, false)
		if _, err := fmt.Fprintf(in, "send %d %s\n", seq, hex.EncodeToString(payload)); err != nil {
			t.Fatal(err)
		}
		answer("send")
		seq++
	}
	// The subscription has arrived (the script waited for it): the first
	// batch reaches the Handler, which holds it.
	send()
	poll.WaitFor(t, waitTimeout, "the first batch", func() bool { return len(updates()) > 0 })
	if st := fan().FanIn; st.Conns != 1 || st.Topics != 1 {
		t.Fatalf("fan-in conns %d topics %d, want 1 and 1", st.Conns, st.Topics)
	}
	for range 5 {
		send()
	}
	if _, err := io.WriteString(in, "close\n"); err != nil {
		t.Fatal(err)
	}
	answer("close")
	// The close is seen while the messages wait: the topic has no holder.
	poll.WaitFor(t, waitTimeout, "the connection's close", func() bool {
		e, ok := engine()
		return fan().FanIn.Conns == 0 && ok && !e.Connected && e.Holder.Addr == ""
	})
	close(release)
	poll.WaitFor(t, waitTimeout, "the queued messages refused as conn_gone", func() bool {
		return fan().FanIn.RefusedBy.ConnGone == 5
	})
	poll.WaitFor(t, waitTimeout, "the engine's retirement", func() bool {
		_, ok := engine()
		return !ok && fan().FanIn.Departed == 1
	})
	st := fan().FanIn
	if st.Topics != 0 || st.Conns != 0 || st.Connections != 1 {
		t.Errorf("after retirement: topics %d conns %d connections %d, want 0 0 1", st.Topics, st.Conns, st.Connections)
	}
	if st.Refused != st.RefusedBy.ConnGone {
		t.Errorf("refused %d, of which conn_gone %d: want no other reason (%+v)", st.Refused, st.RefusedBy.ConnGone, st.RefusedBy)
	}
	// Nothing of the closed connection was delivered after its first
	// batch: the engine got that batch, then its departure.
	if got := updates(); len(got) != 2 || got[0] != UpdateBatch || got[1] != UpdateDeparted {
		t.Errorf("updates %q, want [batch departed]", got)
	}
	if !logs.contains("fan-in refused a message of a closed connection") || !logs.contains("reason=conn_gone") {
		t.Errorf("no conn_gone log line")
	}
}

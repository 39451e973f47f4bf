package kvevents

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/pypeer"
	"github.com/zmqguard/zmqguard/vllm"
)

// describe renders every field of an event, for comparisons.
func describe(e *Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s hashes=", e.Type)
	for _, h := range e.BlockHashes {
		fmt.Fprintf(&b, "%s/%v,", h, h.IsBytes())
	}
	fmt.Fprintf(&b, " parent=%v tokens=%v bs=%d lora=%v medium=%v name=%v extra=%v:", e.ParentBlockHash, e.TokenIDs,
		e.BlockSize, e.LoraID, e.Medium, e.LoraName, e.HasExtraKeys)
	for _, k := range e.ExtraKeys {
		fmt.Fprintf(&b, "%x,", k)
	}
	fmt.Fprintf(&b, " group=%v kind=%v win=%v loc=%v own=%v session=%v", e.GroupIdx, e.KVCacheSpecKind,
		e.KVCacheSpecSlidingWindow, e.Locality, e.Ownership, e.SessionID)
	return b.String()
}

// pyBatch is what testdata/vllm_publisher.py publishes for (run, seq).
func pyBatch(run, seq uint64) (float64, []Event) {
	base := run*1000 + seq
	var hashes []Hash
	if seq%2 == 0 {
		hashes = []Hash{IntHash(base), IntHash(1<<63 + base)}
	} else {
		d := append(bytes.Repeat([]byte{byte(base % 256)}, 31), byte(seq))
		h, _ := BytesHash(d)
		hashes = []Hash{h}
	}
	n := int64(len(hashes))
	st := Event{Type: BlockStored, BlockHashes: hashes, BlockSize: 2, Medium: String("GPU")}
	if seq != 0 {
		st.ParentBlockHash = OptHash{V: IntHash(base - 1), Valid: true}
	}
	for i := int64(0); i < 2*n; i++ {
		st.TokenIDs = append(st.TokenIDs, int64(base)+i)
	}
	if seq%3 == 0 {
		st.HasExtraKeys = true
		for i := int64(0); i < n; i++ {
			st.ExtraKeys = append(st.ExtraKeys, append([]byte{0x92, 0xa4, 's', 'a', 'l', 't'}, byte(seq)))
		}
	}
	if seq%2 == 1 {
		st.GroupIdx = Int(0)
	}
	evs := []Event{st, {Type: BlockRemoved, BlockHashes: []Hash{IntHash(base)}, Medium: String("CPU")}}
	if seq == 5 {
		evs = append(evs, Event{Type: AllBlocksCleared})
	}
	return 1700000000.0 + float64(base), evs
}

type lineRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (r *lineRecorder) handle(_ context.Context, u Update) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch u.Kind {
	case UpdateBatch:
		s := fmt.Sprintf("batch %d ts=%v dp=%v", u.Seq, u.Batch.TS, u.Batch.DataParallelRank)
		for i := range u.Batch.Events {
			s += fmt.Sprintf(" [%d %s]", u.Batch.Index[i], describe(&u.Batch.Events[i]))
		}
		r.lines = append(r.lines, s)
	case UpdateReset:
		r.lines = append(r.lines, fmt.Sprintf("reset %d", u.Seq))
	case UpdateLost:
		r.lines = append(r.lines, fmt.Sprintf("lost %d %d", u.From, u.To))
	}
	return nil
}

func (r *lineRecorder) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.lines...)
}

// TestInteropPythonPublisher: a pyzmq publisher sending vLLM's exact bytes,
// with gaps recovered by replay and a restart, in both event forms and both
// replay framings; the Go subscriber delivers exactly what was published.
func TestInteropPythonPublisher(t *testing.T) {
	py := pypeer.Require(t, "zmq", "msgpack")
	var want []string
	for run, n := range []uint64{10, 5} {
		if run == 1 {
			want = append(want, "reset 0")
		}
		for seq := uint64(0); seq < n; seq++ {
			ts, evs := pyBatch(uint64(run), seq)
			s := fmt.Sprintf("batch %d ts=%v dp=%v", seq, ts, Int(0))
			for i := range evs {
				s += fmt.Sprintf(" [%d %s]", i, describe(&evs[i]))
			}
			want = append(want, s)
		}
	}
	for _, c := range [][3]string{{"map", "topic", ""}, {"array", "legacy", ""}, {"map", "topic", "connect"}} {
		t.Run(strings.TrimSuffix(c[0]+"-"+c[1]+"-"+c[2], "-"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			rec := &lineRecorder{}
			sub, err := NewSubscriber(Config{Handler: rec.handle, Logger: quiet, Topic: "kv@pod-1", ReplayTimeout: 20 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			args := []string{"testdata/vllm_publisher.py", c[0], c[1]}
			if c[2] != "" {
				args = append(args, c[2])
			}
			cmd := exec.CommandContext(ctx, py, args...)
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { stdin.Close(); cmd.Wait() }()
			line, err := bufio.NewReader(stdout).ReadString('\n')
			if err != nil {
				t.Fatalf("publisher: %v %s", err, stderr.String())
			}
			eps := strings.Fields(line)
			if c[2] == "connect" {
				// vLLM connects its PUB when the endpoint names a host:
				// the subscriber binds, and tells the publisher where.
				if err := sub.Add(Source{Name: "py", Live: "tcp://127.0.0.1:0", Bind: true, Replay: eps[1]}); err != nil {
					t.Fatal(err)
				}
				if _, err := io.WriteString(stdin, sub.Endpoint("py")+"\n"); err != nil {
					t.Fatal(err)
				}
			} else if err := sub.Add(Source{Name: "py", Live: eps[0], Replay: eps[1]}); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- sub.Run(ctx) }()
			deadline := time.Now().Add(40 * time.Second)
			for len(rec.get()) < len(want) && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			cancel()
			<-done
			got := rec.get()
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("got\n%s\nwant\n%s\npublisher stderr: %s", strings.Join(got, "\n"), strings.Join(want, "\n"), stderr.String())
			}
			st := sub.Stats().Total
			if st.Replayed != 4 || st.Resets != 1 || st.Gaps != 3 || st.Lost != 0 || st.Dropped.Total() != 0 || st.DroppedEvents.Total() != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// TestInteropPythonSubscriber: the Go publisher's live messages and replay
// replies, read by pyzmq (SUB and DEALER) and msgpack, are vLLM's bytes.
func TestInteropPythonSubscriber(t *testing.T) {
	py := pypeer.Require(t, "zmq", "msgpack")
	for _, name := range []string{"latest", "0.25"} {
		t.Run(name, func(t *testing.T) {
			rel, _ := vllm.Parse(name)
			r := rel.Rules()
			p, err := NewPublisher(PublisherConfig{Release: rel, Endpoint: "tcp://127.0.0.1:0", Bind: true, ReplayEndpoint: "tcp://127.0.0.1:0",
				Topic: "kv@p@m", Logger: quiet, Now: func() time.Time { return time.Unix(1700000000, 5e8) }})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, py, "testdata/py_subscriber.py", loopback(p.Endpoint()), p.ReplayEndpoint(), "3")
			stdout, _ := cmd.StdoutPipe()
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Wait()
			br := bufio.NewReader(stdout)
			if l, err := br.ReadString('\n'); err != nil || l != "ready\n" {
				t.Fatalf("subscriber: %q %v %s", l, err, stderr.String())
			}
			var mu sync.Mutex
			var lines []string
			readDone := make(chan struct{})
			go func() {
				defer close(readDone)
				for {
					l, err := br.ReadString('\n')
					if err != nil {
						return
					}
					mu.Lock()
					lines = append(lines, strings.TrimSpace(l))
					mu.Unlock()
				}
			}()
			evs := []Event{vecStored(), vecRemoved(), {Type: AllBlocksCleared}}
			if !r.KVEventsMapForm {
				evs[1].GroupIdx = OptInt{}
			}
			// Publish until pyzmq's subscription is in (slow joiner), then
			// the replay shows every batch the buffer holds.
			waitFor(t, "python to read 3 live messages", func() bool {
				p.Publish(evs...)
				time.Sleep(20 * time.Millisecond)
				mu.Lock()
				defer mu.Unlock()
				return len(lines) >= 3
			})
			<-readDone
			if err := cmd.Wait(); err != nil {
				t.Fatalf("python: %v %s", err, stderr.String())
			}
			var wantPayload string
			if r.KVEventsMapForm {
				wantPayload = hex.EncodeToString(batchOf(t, vecStoredMap, vecRemovedMap, vecClearedMap))
			} else {
				wantPayload = "93cb41d954fc4020000093" + hex.EncodeToString(appendEventArray(nil, &evs[0])) + vecRemovedArrFull + vecClearedArr + "00"
			}
			topic := hex.EncodeToString([]byte("kv@p@m"))
			var live, replay []string
			for _, l := range lines {
				f := strings.Fields(l)
				switch f[0] {
				case "live":
					live = append(live, l)
					if f[1] != topic || f[3] != wantPayload {
						t.Fatalf("live line %q\nwant payload %s", l, wantPayload)
					}
				case "replay":
					replay = append(replay, f[1])
				}
			}
			if len(live) != 3 || len(replay) < 4 {
				t.Fatalf("live %d replay %d", len(live), len(replay))
			}
			for i, rp := range replay[:len(replay)-1] {
				fr := strings.Split(rp, "|")
				seq := fmt.Sprintf("%016x", i)
				if r.KVReplayTopicFrame {
					if len(fr) != 4 || fr[0] != "" || fr[1] != topic || fr[2] != seq || fr[3] != wantPayload {
						t.Fatalf("replay %d: %q", i, rp)
					}
				} else if len(fr) != 3 || fr[0] != "" || fr[1] != seq || fr[2] != wantPayload {
					t.Fatalf("replay %d: %q", i, rp)
				}
			}
			end := replay[len(replay)-1]
			if r.KVReplayTopicFrame && end != "||"+vecEndOfReplay+"|" || !r.KVReplayTopicFrame && end != "|"+vecEndOfReplay+"|" {
				t.Fatalf("end marker %q", end)
			}
		})
	}
}

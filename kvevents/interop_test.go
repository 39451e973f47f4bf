package kvevents

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/golden"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/internal/testkit/pypeer"
	"github.com/zmqguard/zmqguard/vllm"
)

// describe renders every field of an event, for comparisons.
func describe(e *Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s hashes=", e.Type)
	for _, h := range e.BlockHashes {
		fmt.Fprintf(&b, "%s/%v,", h, h.isBytes())
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

// goldenLive returns the values of the golden live-batch vectors, in file
// order: what testdata/vllm_publisher.py sends, as vLLM's own bytes.
func goldenLive(t *testing.T) (ts []float64, events [][]Event, ranks []Opt[int64], payloads [][]byte) {
	t.Helper()
	for _, v := range golden.Load(t, "kv-events") {
		var val goldenKV
		if err := jsonDecode(v.Values, &val); err != nil {
			t.Fatal(err)
		}
		if val.Message != "kv_event_batch" {
			continue
		}
		var gb goldenBatch
		if err := jsonDecode(val.Decoded, &gb); err != nil {
			t.Fatal(err)
		}
		evs := make([]Event, len(gb.Events))
		for i, m := range gb.Events {
			var err error
			if evs[i], err = goldenEvent(m); err != nil {
				t.Fatalf("%s event %d: %v", v.ID, i, err)
			}
		}
		var rank Opt[int64]
		if gb.Rank != nil {
			r, _ := gb.Rank.Int64()
			rank = Some[int64](r)
		}
		frames, err := v.Frames()
		if err != nil {
			t.Fatal(err)
		}
		ts, events, ranks, payloads = append(ts, gb.TS), append(events, evs), append(ranks, rank), append(payloads, frames[2])
	}
	return ts, events, ranks, payloads
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

// TestInteropPythonPublisher: a pyzmq publisher sending vLLM's own bytes
// (the golden vectors' payloads, in vLLM's framing), with gaps recovered by
// replay and a restart, in both replay framings; the Go subscriber delivers
// exactly the values the vectors hold.
func TestInteropPythonPublisher(t *testing.T) {
	py := pypeer.Require(t, "zmq")
	gts, gevs, granks, _ := goldenLive(t)
	var want []string
	for run, n := range []int{20, 14} {
		if run == 1 {
			want = append(want, "reset 0")
		}
		for seq := 0; seq < n; seq++ {
			k := (run*20 + seq) % len(gts)
			s := fmt.Sprintf("batch %d ts=%v dp=%v", seq, gts[k], granks[k])
			for i := range gevs[k] {
				s += fmt.Sprintf(" [%d %s]", i, describe(&gevs[k][i]))
			}
			want = append(want, s)
		}
	}
	for _, c := range [][2]string{{"topic", ""}, {"legacy", ""}, {"topic", "connect"}} {
		t.Run(strings.TrimSuffix(c[0]+"-"+c[1], "-"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			rec := &lineRecorder{}
			sub, err := NewSubscriber(Config{Handler: rec.handle, Logger: quiet, Topic: "kv-", ReplayTimeout: 20 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			args := []string{"testdata/vllm_publisher.py", filepath.Join(golden.Dir(), "kv-events.jsonl"), c[0]}
			if c[1] != "" {
				args = append(args, c[1])
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
			if c[1] == "connect" {
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
			st := sub.Stats()
			if st.Replayed != 4 || st.Resets != 1 || st.Gaps != 3 || st.Lost != 0 || st.Dropped.Total() != 0 || st.DroppedEvents.Total() != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// TestInteropPythonSubscriber: the Go publisher's live messages and replay
// replies, read by pyzmq (SUB and DEALER), are vLLM's bytes: for vLLM main
// each payload equals the golden vector (written by vLLM's encoder) whose
// values were published. The 0.25 profile (array form, replies without the
// topic frame) has no golden vectors: there the framing is checked and the
// payload is the array form of the same values.
func TestInteropPythonSubscriber(t *testing.T) {
	py := pypeer.Require(t, "zmq")
	gts, gevs, granks, gpay := goldenLive(t)
	for _, name := range []string{goldenRelease.String(), "0.25"} {
		t.Run(name, func(t *testing.T) {
			rel, _ := vllm.Parse(name)
			r := rel.Rules()
			p, err := NewPublisher(PublisherConfig{Release: rel, Endpoint: "tcp://127.0.0.1:0", Bind: true, ReplayEndpoint: "tcp://127.0.0.1:0",
				Topic: "kv-events", Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			// wantPayload is what batch seq must carry: batch seq has the
			// values of golden live vector seq mod their count.
			wantPayload := func(seq uint64) string {
				k := int(seq % uint64(len(gts)))
				if r.KVEventsMapForm {
					return hex.EncodeToString(gpay[k])
				}
				return hex.EncodeToString(AppendBatch(nil, gts[k], gevs[k], granks[k], false))
			}
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
			// Publish until pyzmq's subscription is in (slow joiner), then
			// the replay shows every batch the buffer holds.
			var next int
			poll.WaitFor(t, waitTimeout, "python to read 3 live messages", func() bool {
				k := next % len(gts)
				next++
				if err := p.publishBatch(gts[k], gevs[k], granks[k]); err != nil {
					t.Errorf("publish: %v", err)
				}
				time.Sleep(20 * time.Millisecond)
				mu.Lock()
				defer mu.Unlock()
				return len(lines) >= 3
			})
			<-readDone
			if err := cmd.Wait(); err != nil {
				t.Fatalf("python: %v %s", err, stderr.String())
			}
			topic := hex.EncodeToString([]byte("kv-events"))
			var live, replay []string
			for _, l := range lines {
				f := strings.Fields(l)
				switch f[0] {
				case "live":
					live = append(live, l)
					seq, err := strconv.ParseUint(f[2], 16, 64)
					if err != nil || f[1] != topic || f[3] != wantPayload(seq) {
						t.Fatalf("live line %q\nwant payload %s", l, wantPayload(seq))
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
					if len(fr) != 4 || fr[0] != "" || fr[1] != topic || fr[2] != seq || fr[3] != wantPayload(uint64(i)) {
						t.Fatalf("replay %d: %q", i, rp)
					}
				} else if len(fr) != 3 || fr[0] != "" || fr[1] != seq || fr[2] != wantPayload(uint64(i)) {
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

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/hostile"
	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/socket"
)

// demoKV is the demo's KV-events stage: a Go publisher with vLLM's bytes and
// a replay buffer, a Subscriber following it (dialed, with replay) and a
// second, bound source that the hostile scanner attacks the whole time. At
// the end the subscriber must still deliver from the publisher, in order.
type demoKV struct {
	pub     *kvevents.Publisher
	sub     *kvevents.Subscriber
	logger  *slog.Logger
	cancel  context.CancelFunc
	runDone chan error
	wg      sync.WaitGroup

	batches  atomic.Uint64
	outOfSeq atomic.Uint64
	lastSeq  atomic.Int64
	probes   atomic.Uint64
	deaths   atomic.Uint64
	runErr   error
}

const demoKVSource, demoKVBound = "engine-0", "bound"

// startDemoKV starts the stage; its components run until close.
func startDemoKV(logger *slog.Logger, sockOpts socket.Options) (*demoKV, error) {
	k := &demoKV{logger: logger, runDone: make(chan error, 1)}
	k.lastSeq.Store(-1)
	pub, err := kvevents.NewPublisher(kvevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Bind: true,
		ReplayEndpoint: "tcp://127.0.0.1:0", Topic: "kv@demo-pod@model", Socket: sockOpts, Logger: logger})
	if err != nil {
		return nil, err
	}
	k.pub = pub
	sub, err := kvevents.NewSubscriber(kvevents.Config{Topic: "kv@", FromStart: true, Socket: sockOpts, Logger: logger,
		LogInterval: 5 * time.Second, Handler: k.handle})
	if err != nil {
		pub.Close()
		return nil, err
	}
	k.sub = sub
	for _, s := range []kvevents.Source{
		{Name: demoKVSource, Live: pub.Endpoint(), Replay: pub.ReplayEndpoint()},
		{Name: demoKVBound, Live: "tcp://127.0.0.1:0", Bind: true},
	} {
		if err := sub.Add(s); err != nil {
			sub.Close()
			pub.Close()
			return nil, err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	k.cancel = cancel
	go func() { k.runDone <- guarded(func() error { return sub.Run(ctx) }) }()
	return k, nil
}

func (k *demoKV) handle(_ context.Context, u kvevents.Update) error {
	if u.Kind != kvevents.UpdateBatch || u.Source != demoKVSource {
		return nil
	}
	if prev := k.lastSeq.Swap(int64(u.Seq)); prev >= 0 && uint64(prev)+1 != u.Seq {
		k.outOfSeq.Add(1)
	}
	k.batches.Add(1)
	return nil
}

// boundEndpoint is the attacked source's listening endpoint.
func (k *demoKV) boundEndpoint() string { return k.sub.Endpoint(demoKVBound) }

// demoKVFirstProbeWait bounds how long the stage keeps attacking after its
// run ends when no probe has completed yet: the line it prints claims an
// attack, so at least one probe must have finished on a loaded machine too.
const demoKVFirstProbeWait = 15 * time.Second

// run publishes synthetic batches and attacks the bound source until ctx
// ends and at least one probe has completed (bounded by
// demoKVFirstProbeWait).
func (k *demoKV) run(ctx context.Context) {
	scanCtx, scanCancel := context.WithCancel(context.Background())
	defer scanCancel()
	k.wg.Go(func() {
		hostile.Scan(scanCtx, []string{k.boundEndpoint()}, hostile.ScanConfig{
			Duration: 24 * time.Hour,
			Options:  hostile.Options{Hold: 300 * time.Millisecond, Timeout: 5 * time.Second},
			OnProbe: func(ev hostile.Event) {
				k.probes.Add(1)
				if !ev.Alive {
					k.deaths.Add(1)
					k.logger.Error("the kv-events subscriber stopped answering", "probe", ev.Probe.Name, "err", ev.AliveErr)
				}
			},
		})
	})
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	var evs []kvevents.Event
	for n := uint64(0); ; n++ {
		select {
		case <-ctx.Done():
			deadline := time.Now().Add(demoKVFirstProbeWait)
			for k.probes.Load() == 0 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			scanCancel()
			k.wg.Wait()
			return
		case <-t.C:
			evs = kvSynthetic(n, 4, evs)
			k.pub.Publish(evs...)
		}
	}
}

// check publishes a few more batches and reports whether they arrive and
// the subscriber is still running.
func (k *demoKV) check() bool {
	before := k.batches.Load()
	deadline := time.Now().Add(10 * time.Second)
	var evs []kvevents.Event
	for n := uint64(1 << 20); time.Now().Before(deadline); n++ {
		select {
		case err := <-k.runDone:
			k.runErr = fmt.Errorf("subscriber stopped: %v", err)
			k.runDone <- err
			return false
		default:
		}
		evs = kvSynthetic(n, 1, evs)
		k.pub.Publish(evs...)
		if k.batches.Load() >= before+5 {
			return k.outOfSeq.Load() == 0 && k.deaths.Load() == 0
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// writeLine prints the stage's line under the demo's table.
func (k *demoKV) writeLine(w io.Writer, ok bool) {
	st := k.sub.Stats()
	var good, bound kvevents.SourceStats
	for _, s := range st.Sources {
		switch s.Name {
		case demoKVSource:
			good = s
		case demoKVBound:
			bound = s
		}
	}
	fmt.Fprintf(w, "kv-events:             %d batches in order from the publisher (%d replayed, %d lost, %d out of order); the attacked source took %d hostile probes, refused %d connections and dropped %d messages; still delivering at the end: %s\n",
		k.batches.Load(), good.Replayed, good.Lost, k.outOfSeq.Load(), k.probes.Load(), bound.Refused.Total(), bound.Dropped.Total(), yesNo(ok))
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "NO"
}

func (k *demoKV) close() {
	k.cancel()
	<-k.runDone
	k.sub.Close()
	k.pub.Close()
}

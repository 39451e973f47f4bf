package main

import (
	"context"
	"time"

	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/socket"
)

// row3 measures row 3 of the fair-share table (see the package doc).
func row3(nClients int, d time.Duration) (any, error) {
	pub, err := kvevents.NewPublisher(kvevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Bind: true,
		ReplayEndpoint: "tcp://127.0.0.1:0", Logger: quiet})
	if err != nil {
		return nil, err
	}
	defer pub.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		tk := time.NewTicker(time.Millisecond)
		defer tk.Stop()
		for ctx.Err() == nil {
			pub.Publish(kvevents.Event{Type: kvevents.AllBlocksCleared})
			select {
			case <-ctx.Done():
			case <-tk.C:
			}
		}
	}()
	// Replay clients that never read: each asks for the whole buffer, again
	// every 100 ms.
	for range nClients {
		d, err := socket.New("DEALER", socket.DefaultOptions())
		if err != nil {
			return nil, err
		}
		defer d.Close()
		if err := d.Dial(pub.ReplayEndpoint()); err != nil {
			return nil, err
		}
		go func() {
			for ctx.Err() == nil {
				sctx, c := context.WithTimeout(ctx, 100*time.Millisecond)
				d.Send(sctx, []byte{}, seq8(0))
				c()
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
	}
	time.Sleep(5 * time.Second) // 5,000 batches held before the honest subscriber joins (the scenario's set-up)
	tr := newTracker()
	sub, err := kvevents.NewSubscriber(kvevents.Config{Handler: tr.handle, Logger: quiet, FromStart: true})
	if err != nil {
		return nil, err
	}
	if err := sub.Add(kvevents.Source{Name: "s", Live: pub.Endpoint(), Replay: pub.ReplayEndpoint()}); err != nil {
		return nil, err
	}
	sctx, scancel := context.WithTimeout(context.Background(), d)
	defer scancel()
	sub.Run(sctx)
	st := sub.Stats()
	ps := pub.Stats()
	return map[string]any{"row": 3, "replay_clients": nClients, "seconds": d.Seconds(), "published": ps.Published,
		"delivered": st.Batches, "replayed": st.Replayed, "lost": st.Lost, "replays": st.Replays, "lost_ranges": st.LostRanges}, nil
}

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/socket"
)

// row7 measures row 7 of the fair-share table (see the package doc).
func row7(d time.Duration) (any, error) {
	tr := newTracker()
	sub, stop, err := startSub(tr.handle)
	if err != nil {
		return nil, err
	}
	defer stop()
	if err := sub.Add(kvevents.Source{Name: "b", Live: "tcp://127.0.0.1:0", Bind: true}); err != nil {
		return nil, err
	}
	ep := sub.Endpoint("b")
	dial := func() (*socket.Socket, error) {
		xp, err := socket.New("XPUB", socket.DefaultOptions())
		if err != nil {
			return nil, err
		}
		go func() {
			for {
				if _, err := xp.Recv(context.Background()); err != nil {
					return
				}
			}
		}()
		return xp, xp.Dial(ep)
	}
	ctx := context.Background()
	engine, err := dial()
	if err != nil {
		return nil, err
	}
	defer engine.Close()
	// Wait for the engine's first batch to arrive.
	var sent uint64
	tk := time.NewTicker(time.Millisecond)
	defer tk.Stop()
	for !tr.until(10*time.Millisecond, func() bool { return len(tr.delivered["b"]) > 0 }) {
		engine.Send(ctx, []byte("t"), seq8(sent), batch(float64(sent)))
		sent++
		if sent > 20000 {
			return nil, fmt.Errorf("the engine never got through")
		}
	}
	first := sent
	var intruder *socket.Socket
	start := time.Now()
	var isent uint64
	for time.Since(start) < d {
		<-tk.C
		engine.Send(ctx, []byte("t"), seq8(sent), batch(float64(sent)))
		sent++
		if intruder == nil && time.Since(start) > time.Second {
			if intruder, err = dial(); err != nil {
				return nil, err
			}
			defer intruder.Close()
		}
		if intruder != nil {
			intruder.Send(ctx, []byte("t"), seq8(isent), batch(424242))
			isent++
		}
	}
	last := sent - 1
	tr.until(5*time.Second, func() bool { _, ok := tr.delivered["b"][last]; return ok })
	st := sub.Stats()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	delivered := 0
	for s := first; s < sent; s++ {
		if _, ok := tr.delivered["b"][s]; ok {
			delivered++
		}
	}
	return map[string]any{"row": 7, "engine_sent": sent - first, "engine_delivered": delivered,
		"intruder_sent": isent, "intruder_delivered": tr.foreign, "resets": tr.resets["b"], "lost": tr.lost["b"],
		"refused_policy": st.Refused[decodeguard.ReasonPolicy]}, nil
}
